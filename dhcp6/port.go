package dhcp6

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// port is the one packet socket of a client on a parent link, shared by
// every transaction on that parent (or the connection WithConn opened).
// Replies go to the transaction with their transaction ID; Neighbour
// Solicitations for the link-local address of an endpoint with a
// transaction under way are answered. It exists while a call uses it.
type port struct {
	parent string
	mac    net.HardwareAddr // the parent's; nil with WithConn
	conn   net.PacketConn   // whole Ethernet frames
	member func(add bool, typ int, mac net.HardwareAddr) error
	refs   int           // guarded by Client.mu
	closed chan struct{} // closed before the socket
	done   chan struct{} // closed when the receive loop ends

	mu      sync.Mutex
	waiters map[dhcpv6.TransactionID]chan reply
	owners  map[netip.Addr]*owner
}

// owner is an endpoint's link-local address the port answers for.
type owner struct {
	mac  net.HardwareAddr
	refs int
}

// reply is a DHCPv6 message as received.
type reply struct {
	m      *dhcpv6.Message
	dstMAC net.HardwareAddr
}

// port returns the parent's port, opening it for the first user; the
// caller gives it back with put.
func (c *Client) port(parent string) (*port, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.ports[parent]; p != nil {
		p.refs++
		return p, nil
	}
	p := &port{parent: parent, refs: 1, closed: make(chan struct{}), done: make(chan struct{}),
		waiters: map[dhcpv6.TransactionID]chan reply{}, owners: map[netip.Addr]*owner{}}
	if c.open != nil {
		conn, err := c.open(parent)
		if err == nil && conn == nil {
			err = fmt.Errorf("the connection opener gave no connection for parent %s", parent)
		}
		if err != nil {
			return nil, err
		}
		p.conn = conn
	} else if err := c.listen(p); err != nil {
		return nil, err
	}
	c.ports[parent] = p
	go p.receive()
	return p, nil
}

// put gives a port back; the last user closes it.
func (c *Client) put(p *port) {
	c.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(c.ports, p.parent)
	}
	c.mu.Unlock()
	if last {
		close(p.closed)
		_ = p.conn.Close()
		<-p.done
	}
}

// listen opens p's packet socket on its parent, in the client's
// namespace: SOCK_RAW, ETH_P_ALL (see the package documentation), with
// the reply filter attached before it is bound.
func (c *Client) listen(p *port) error {
	filter, err := bpf.Assemble(replyFilter())
	if err != nil {
		return fmt.Errorf("assemble the DHCPv6 reply filter: %w", err)
	}
	return c.inNetns(func() error {
		ifi, err := net.InterfaceByName(p.parent)
		if err != nil {
			return fmt.Errorf("parent %s: %w: give a link that exists in the daemon's namespace", p.parent, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("parent %s has no Ethernet address (%q): DHCPv6 for endpoints needs an Ethernet link", p.parent, ifi.HardwareAddr)
		}
		conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: filter})
		if err != nil {
			return fmt.Errorf("open a packet socket on parent %s for DHCPv6: %w (it needs CAP_NET_RAW)", p.parent, err)
		}
		p.conn, p.mac = conn, ifi.HardwareAddr
		p.member = func(add bool, typ int, mac net.HardwareAddr) error { return membership(conn, ifi.Index, add, typ, mac) }
		return nil
	})
}

// membership adds (or drops) a PACKET_MR_UNICAST or PACKET_MR_MULTICAST
// membership for mac on link index; the kernel counts them per socket
// and drops them all when it closes.
func membership(c *packet.Conn, index int, add bool, typ int, mac net.HardwareAddr) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	mreq := unix.PacketMreq{Ifindex: int32(index), Type: uint16(typ), Alen: uint16(len(mac))}
	copy(mreq.Address[:], mac)
	opt, name := unix.PACKET_ADD_MEMBERSHIP, "PACKET_ADD_MEMBERSHIP"
	if !add {
		opt, name = unix.PACKET_DROP_MEMBERSHIP, "PACKET_DROP_MEMBERSHIP"
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptPacketMreq(int(fd), unix.SOL_PACKET, opt, &mreq) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setsockopt %s %s: %w", name, mac, serr)
	}
	return nil
}

// claim makes p receive for r until the returned func is called: r's MAC
// joins the parent's unicast filter (unless it is the parent's own) and
// its link-local address's solicited-node group the multicast filter, and
// Neighbour Solicitations for that address are answered with r's MAC.
func (p *port) claim(r *Request) (func(), error) {
	ll := r.source()
	var undo []func()
	release := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if p.member != nil {
		if !bytes.Equal(r.MAC, p.mac) {
			if err := p.member(true, unix.PACKET_MR_UNICAST, r.MAC); err != nil {
				return nil, fmt.Errorf("add MAC %s to the unicast filter of parent %s, to receive DHCPv6 replies to it: %w (it needs CAP_NET_RAW)", r.MAC, p.parent, err)
			}
			undo = append(undo, func() { _ = p.member(false, unix.PACKET_MR_UNICAST, r.MAC) })
		}
		g := solicitedNodeMAC(ll)
		if err := p.member(true, unix.PACKET_MR_MULTICAST, g); err != nil {
			release()
			return nil, fmt.Errorf("join the Ethernet multicast group %s on parent %s, to answer Neighbour Solicitations for %s: %w (it needs CAP_NET_RAW)", g, p.parent, ll, err)
		}
		undo = append(undo, func() { _ = p.member(false, unix.PACKET_MR_MULTICAST, g) })
	}
	p.mu.Lock()
	o := p.owners[ll]
	if o == nil {
		o = &owner{mac: r.MAC}
		p.owners[ll] = o
	}
	o.refs++
	p.mu.Unlock()
	undo = append(undo, func() {
		p.mu.Lock()
		if o.refs--; o.refs == 0 {
			delete(p.owners, ll)
		}
		p.mu.Unlock()
	})
	return release, nil
}

// receive hands each DHCPv6 message to the transaction waiting for its ID
// and answers Neighbour Solicitations for the claimed addresses, until
// the socket closes. Anything malformed is dropped.
func (p *port) receive() {
	defer close(p.done)
	buf := make([]byte, 65536)
	for {
		n, _, err := p.conn.ReadFrom(buf)
		if err != nil {
			// Closed, or e.g. ENETDOWN while the parent is down: wait.
			select {
			case <-p.closed:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		in, ok := parseFrame(buf[:n])
		switch {
		case !ok:
		case in.nsTarget.IsValid():
			p.answer(in)
		default:
			m := parse(in.dhcp)
			if m == nil {
				continue
			}
			p.mu.Lock()
			if ch := p.waiters[m.TransactionID]; ch != nil {
				select {
				case ch <- reply{m: m, dstMAC: bytes.Clone(in.dstMAC)}:
				default: // the transaction has not read the last ones: drop
				}
			}
			p.mu.Unlock()
		}
	}
}

// answer sends a Neighbour Advertisement for a claimed address.
func (p *port) answer(in inbound) {
	p.mu.Lock()
	o := p.owners[in.nsTarget]
	p.mu.Unlock()
	if o == nil {
		return
	}
	_, _ = p.conn.WriteTo(naFrame(o.mac, in.srcMAC, in.nsTarget, in.src), &packet.Addr{HardwareAddr: in.srcMAC})
}

// parse decodes a DHCPv6 client-server message, or returns nil for
// anything else or malformed, even one that made the parser panic.
func parse(b []byte) (m *dhcpv6.Message) {
	defer func() {
		if recover() != nil {
			m = nil
		}
	}()
	d, err := dhcpv6.FromBytes(b)
	if err != nil {
		return nil
	}
	m, _ = d.(*dhcpv6.Message)
	return m
}

// register reserves a transaction ID no other transaction on the port
// holds.
func (p *port) register() (dhcpv6.TransactionID, chan reply) {
	ch := make(chan reply, 8)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		var xid dhcpv6.TransactionID
		_, _ = rand.Read(xid[:]) // crypto/rand.Read never fails (Go 1.24+)
		if p.waiters[xid] == nil {
			p.waiters[xid] = ch
			return xid, ch
		}
	}
}

func (p *port) unregister(xid dhcpv6.TransactionID) {
	p.mu.Lock()
	delete(p.waiters, xid)
	p.mu.Unlock()
}

// replyFilter keeps, of the frames the parent receives (not those it
// sends), untagged IPv6 with UDP to port 546 or ICMPv6 Neighbour
// Solicitations (no extension headers): a busy parent does not wake the
// client for every packet.
func replyFilter() []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtVLANTagPresent},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 12},
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 10},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: etherIPv6, SkipTrue: 8},
		bpf.LoadAbsolute{Off: ethHeader + 6, Size: 1}, // next header
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoUDP, SkipFalse: 2},
		bpf.LoadAbsolute{Off: ethHeader + ipv6Header + 2, Size: 2}, // UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clientPort, SkipTrue: 3, SkipFalse: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMP6, SkipTrue: 3},
		bpf.LoadAbsolute{Off: ethHeader + ipv6Header, Size: 1}, // ICMPv6 type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 135, SkipTrue: 1},
		bpf.RetConstant{Val: 0x40000},
		bpf.RetConstant{Val: 0},
	}
}

// inNetns runs fn on a thread in the DHCPv6 client's namespace (netnsrun.Do).
func (c *Client) inNetns(fn func() error) error {
	return netnsrun.Do(c.netns, "the DHCPv6 client's", fn)
}
