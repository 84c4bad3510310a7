package probe

import (
	"fmt"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"net"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// conn is what a probe or an announcement needs of its packet socket.
type conn interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	Close() error
}

// listen opens a SOCK_RAW packet socket for proto on parent, in the
// prober's namespace, with filter attached before it is bound (nothing
// else is ever queued on it). A non-nil unicast is added to parent's
// unicast address filter and groups to its multicast filter, for the
// socket's lifetime. The parent's own MAC is not added: it is there.
func (p *Prober) listen(parent string, proto int, filter []bpf.Instruction, unicast net.HardwareAddr, groups []net.HardwareAddr) (*packet.Conn, error) {
	raw, err := bpf.Assemble(filter)
	if err != nil {
		return nil, fmt.Errorf("assemble the packet filter: %w", err)
	}
	var c *packet.Conn
	err = p.inNetns(func() error {
		ifi, err := net.InterfaceByName(parent)
		if err != nil {
			return fmt.Errorf("parent %s: %w: give a link that exists in the daemon's namespace", parent, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("parent %s has no Ethernet address (%q): ARP and Neighbour Discovery need an Ethernet link", parent, ifi.HardwareAddr)
		}
		c, err = packet.Listen(ifi, packet.Raw, proto, &packet.Config{Filter: raw})
		if err != nil {
			return fmt.Errorf("open a packet socket on parent %s: %w (it needs CAP_NET_RAW)", parent, err)
		}
		if unicast != nil && unicast.String() != ifi.HardwareAddr.String() {
			if err := join(c, ifi.Index, unix.PACKET_MR_UNICAST, unicast); err != nil {
				c.Close()
				return fmt.Errorf("add MAC %s to the unicast filter of parent %s, to receive answers to it: %w (it needs CAP_NET_RAW)", unicast, parent, err)
			}
		}
		for _, g := range groups {
			if err := join(c, ifi.Index, unix.PACKET_MR_MULTICAST, g); err != nil {
				c.Close()
				return fmt.Errorf("join the Ethernet multicast group %s on parent %s: %w (it needs CAP_NET_RAW)", g, parent, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// join adds a membership (PACKET_ADD_MEMBERSHIP) of type typ for mac on
// link index to c; the kernel drops it when c closes.
func join(c *packet.Conn, index, typ int, mac net.HardwareAddr) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	mreq := unix.PacketMreq{Ifindex: int32(index), Type: uint16(typ), Alen: uint16(len(mac))}
	copy(mreq.Address[:], mac)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptPacketMreq(int(fd), unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setsockopt PACKET_ADD_MEMBERSHIP: %w", serr)
	}
	return nil
}

// inNetns runs fn on a thread in the prober's namespace (netnsrun.Do).
func (p *Prober) inNetns(fn func() error) error { return netnsrun.Do(p.netns, "the prober's", fn) }
