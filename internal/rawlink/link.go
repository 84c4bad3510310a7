// Package rawlink is the raw link under the DHCPv4 client (package
// dhcp), the DHCPv6 client (dhcp6) and the address probes (probe): the
// packet socket each opens on a parent link, in the daemon's namespace,
// with a BPF filter attached before it is bound and the unicast and
// multicast memberships that let it receive for endpoints whose links do
// not exist yet; the Ethernet, IPv4, IPv6, UDP and ICMPv6 framing and
// parsing with their checksums; and the per-parent Port that the two
// clients share among their transactions, one receive loop handing each
// frame to the transaction it answers (and answering Neighbour
// Solicitations for the link-local addresses the port claims).
//
// The protocol packages keep their messages and state machines; this one
// knows no protocol above UDP and ICMPv6. Like them it is a leaf: it
// imports nothing of the project but netnsrun. Model: insomniacslk/dhcp's
// nclient4 conn_unix.go and ipv4.go (the raw connection and the framing
// apart from the client).
package rawlink

import (
	"bytes"
	"fmt"
	"net"
	"sync"

	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Link is a connection carrying whole Ethernet frames both ways on a
// parent link: a packet socket Listen opened, or a connection given to
// Over (tests). It is safe for concurrent use.
type Link struct {
	parent string
	conn   net.PacketConn
	sock   *packet.Conn     // nil over a given connection
	index  int              // the parent's; with sock
	mac    net.HardwareAddr // the parent's; nil over a given connection

	mu      sync.Mutex
	members []membership // joined and not left yet, for CloseLater

	// later runs CloseLater's close: nil, in a goroutine (a test holds it).
	later func(close func())
}

// membership is one that Join added.
type membership struct {
	kind Membership
	mac  net.HardwareAddr
}

// Config says how Listen opens a socket.
type Config struct {
	// Netns is the namespace the socket is opened in (the calling
	// thread's when not open); Who names it in errors ("the prober's").
	Netns netns.NsHandle
	Who   string
	// Proto is the EtherType the socket receives (unix.ETH_P_*), in host
	// order.
	Proto int
	// Filter is attached before the socket is bound: nothing else is
	// ever queued on it.
	Filter []bpf.Instruction
	// For says what the socket is for in errors (" for DHCP"), and
	// Ethernet, if set, why the parent must have an Ethernet address
	// (its error's end).
	For, Ethernet string
	// Unicast, unless nil or the parent's own MAC, joins the parent's
	// unicast filter, and Groups its multicast filter, for the socket's
	// lifetime.
	Unicast net.HardwareAddr
	Groups  []net.HardwareAddr
}

// Listen opens a SOCK_RAW packet socket on parent as cfg says.
func Listen(parent string, cfg Config) (*Link, error) {
	filter, err := bpf.Assemble(cfg.Filter)
	if err != nil {
		return nil, fmt.Errorf("assemble the packet filter%s: %w", cfg.For, err)
	}
	var l *Link
	err = netnsrun.Do(cfg.Netns, cfg.Who, func() error {
		ifi, err := net.InterfaceByName(parent)
		if err != nil {
			return fmt.Errorf("parent %s: %w: give a link that exists in the daemon's namespace", parent, err)
		}
		if cfg.Ethernet != "" && len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("parent %s has no Ethernet address (%q): %s", parent, ifi.HardwareAddr, cfg.Ethernet)
		}
		c, err := packet.Listen(ifi, packet.Raw, cfg.Proto, &packet.Config{Filter: filter})
		if err != nil {
			return fmt.Errorf("open a packet socket on parent %s%s: %w (it needs CAP_NET_RAW)", parent, cfg.For, err)
		}
		l = &Link{parent: parent, conn: c, sock: c, index: ifi.Index, mac: ifi.HardwareAddr}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cfg.Unicast != nil {
		if err := l.Join(Unicast, cfg.Unicast); err != nil {
			l.Close()
			return nil, fmt.Errorf("add MAC %s to the unicast filter of parent %s, to receive answers to it: %w (it needs CAP_NET_RAW)", cfg.Unicast, parent, err)
		}
	}
	for _, g := range cfg.Groups {
		if err := l.Join(Multicast, g); err != nil {
			l.Close()
			return nil, fmt.Errorf("join the Ethernet multicast group %s on parent %s: %w (it needs CAP_NET_RAW)", g, parent, err)
		}
	}
	return l, nil
}

// Over is a Link over c, a connection that carries whole Ethernet frames
// both ways as an AF_PACKET SOCK_RAW socket does (writes are addressed
// with a *packet.Addr); memberships on it do nothing.
func Over(parent string, c net.PacketConn) *Link { return &Link{parent: parent, conn: c} }

// Parent is the name of the link's parent.
func (l *Link) Parent() string { return l.parent }

// ReadFrom reads a frame.
func (l *Link) ReadFrom(b []byte) (int, net.Addr, error) { return l.conn.ReadFrom(b) }

// WriteTo writes a frame to addr.
func (l *Link) WriteTo(b []byte, addr net.Addr) (int, error) { return l.conn.WriteTo(b, addr) }

// Send writes frame f to its Ethernet destination.
func (l *Link) Send(f []byte) error {
	_, err := l.conn.WriteTo(f, &packet.Addr{HardwareAddr: f[0:6]})
	return err
}

// Close closes the socket; the kernel drops its memberships.
func (l *Link) Close() error { return l.conn.Close() }

// CloseLater leaves the link's memberships at once and closes the socket
// in the background. The kernel's close of a packet socket waits for an
// RCU grace period (packet_release's synchronize_net: 13 ms measured
// here, at every close), which no answer to a request needs to wait for;
// the parent's filters are as they were before the socket when
// CloseLater returns. The link is not used after it; frames may still
// come in until the close.
func (l *Link) CloseLater() {
	l.mu.Lock()
	members := l.members
	l.members = nil
	l.mu.Unlock()
	for i := len(members) - 1; i >= 0; i-- {
		_ = l.member(false, members[i].kind, members[i].mac) // the close drops what this could not
	}
	shut := func() { _ = l.conn.Close() }
	if l.later != nil {
		l.later(shut)
		return
	}
	go shut()
}

// Membership is a kind of address filter entry a socket holds on its
// parent.
type Membership int

const (
	// Unicast adds a MAC to the parent's unicast filter
	// (PACKET_MR_UNICAST): frames to it are received.
	Unicast Membership = unix.PACKET_MR_UNICAST
	// Multicast joins an Ethernet group (PACKET_MR_MULTICAST).
	Multicast Membership = unix.PACKET_MR_MULTICAST
)

// Join adds a membership of kind m for mac, unless mac is the parent's
// own unicast address (it is there) or the link is over a given
// connection; the kernel counts them per socket and drops them all when
// it closes.
func (l *Link) Join(m Membership, mac net.HardwareAddr) error { return l.member(true, m, mac) }

// Leave drops a membership Join added.
func (l *Link) Leave(m Membership, mac net.HardwareAddr) error { return l.member(false, m, mac) }

func (l *Link) member(add bool, m Membership, mac net.HardwareAddr) error {
	if l.sock == nil || m == Unicast && bytes.Equal(mac, l.mac) {
		return nil
	}
	rc, err := l.sock.SyscallConn()
	if err != nil {
		return err
	}
	mreq := unix.PacketMreq{Ifindex: int32(l.index), Type: uint16(m), Alen: uint16(len(mac))}
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		l.members = append(l.members, membership{m, append(net.HardwareAddr(nil), mac...)})
		return nil
	}
	for i, j := range l.members {
		if j.kind == m && bytes.Equal(j.mac, mac) {
			l.members = append(l.members[:i], l.members[i+1:]...)
			break
		}
	}
	return nil
}

// Untagged is the guard put before a receive filter of a socket that
// sees every EtherType: frames with a VLAN tag in the packet's metadata
// (those of the parent's VLAN links, which such a socket on the parent
// sees too) are dropped. The kernel runs it; the x/net/bpf VM of unit
// tests cannot (it has no such extension).
func Untagged(filter []bpf.Instruction) []bpf.Instruction {
	return append([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtVLANTagPresent},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.Jump{Skip: 1},
		bpf.RetConstant{Val: 0},
	}, filter...)
}

// Opener is how a client opens its links: packet sockets in namespace
// Netns (the calling thread's when it is not open: netns.None()), or,
// when Conn is set, over the connections it returns (tests: an
// in-process server answers, no root needed).
type Opener struct {
	Netns netns.NsHandle
	Conn  func(parent string) (net.PacketConn, error)
}

// Open opens parent's link: over the connection Conn returns for it, or
// a packet socket as cfg says, in o.Netns.
func (o Opener) Open(parent string, cfg Config) (*Link, error) {
	if o.Conn == nil {
		cfg.Netns = o.Netns
		return Listen(parent, cfg)
	}
	c, err := o.Conn(parent)
	if err == nil && c == nil {
		err = fmt.Errorf("the connection opener gave no connection for parent %s", parent)
	}
	if err != nil {
		return nil, err
	}
	return Over(parent, c), nil
}
