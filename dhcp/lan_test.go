package dhcp

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The test LAN: the test's own namespace ("near") holds the parent lan0,
// one end of a veth; the other end, srv0 with 198.18.180.1/24, is in a
// second namespace ("far") where a DHCP server runs.

const (
	lanParent = "lan0"
	lanServer = "srv0"
)

var serverAddr = netip.MustParsePrefix("198.18.180.1/24")

type lan struct {
	t         *testing.T
	near, far *itest.Netns
	parentMAC net.HardwareAddr
}

// newLAN builds the test LAN; it skips outside root (fails in CI).
func newLAN(t *testing.T) *lan {
	t.Helper()
	itest.RequireRoot(t)
	near, far := itest.NewNetns(t), itest.NewNetns(t)
	near.AddVeth(lanParent, lanServer, 1500)
	if err := near.NL.LinkSetNsFd(near.MustLink(lanServer), int(far.Handle())); err != nil {
		t.Fatalf("move %s into the server's namespace: %v", lanServer, err)
	}
	srv := far.MustLink(lanServer)
	if err := far.NL.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: serverAddr.Addr().AsSlice(), Mask: net.CIDRMask(serverAddr.Bits(), 32)}}); err != nil {
		t.Fatalf("address %s on %s: %v", serverAddr, lanServer, err)
	}
	far.Up(lanServer) // links moved into a namespace arrive down
	return &lan{t: t, near: near, far: far, parentMAC: near.MustLink(lanParent).Attrs().HardwareAddr}
}

// client is a lease client in the near namespace, retransmitting fast.
func (l *lan) client() *Client {
	return New(WithNetns(l.near.Handle()), WithRetransmit(300*time.Millisecond))
}

// inNetns runs fn on a thread in ns.
func inNetns(ns netns.NsHandle, fn func() error) error {
	return netnsrun.Do(ns, "the test's", fn)
}

// testServer is an in-process DHCP server (the library's server4) on srv0.
type testServer struct {
	t         *testing.T
	leaseTime time.Duration
	mu        sync.Mutex
	leases    map[string]netip.Addr // by client ID, else chaddr
	next      int
	nak       bool                                 // refuse every REQUEST
	unicastTo func(yiaddr netip.Addr) (mac string) // ignore the BROADCAST flag: unicast to yiaddr at this MAC
	seen      []*dhcpv4.DHCPv4
	peers     []net.Addr
}

// serve starts a server on the LAN; it stops at cleanup.
func (l *lan) serve(leaseTime time.Duration) *testServer {
	s := &testServer{t: l.t, leaseTime: leaseTime, leases: map[string]netip.Addr{}}
	var conn *net.UDPConn
	err := inNetns(l.far.Handle(), func() (err error) {
		conn, err = server4.NewIPv4UDPConn(lanServer, &net.UDPAddr{Port: serverPort})
		return err
	})
	if err != nil {
		l.t.Fatalf("DHCP server socket on %s: %v", lanServer, err)
	}
	srv, err := server4.NewServer("", nil, func(c net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) { s.handle(l, c, peer, m) }, server4.WithConn(conn))
	if err != nil {
		l.t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	l.t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *testServer) key(m *dhcpv4.DHCPv4) string {
	if id := m.Options.Get(dhcpv4.OptionClientIdentifier); id != nil {
		return "id " + hex.EncodeToString(id)
	}
	return "mac " + m.ClientHWAddr.String()
}

func (s *testServer) handle(l *lan, c net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, m)
	s.peers = append(s.peers, peer)
	if m.MessageType() != dhcpv4.MessageTypeRelease && m.MessageType() != dhcpv4.MessageTypeDecline && !m.IsBroadcast() {
		s.t.Errorf("the client sent a %s without the BROADCAST flag", m.MessageType())
	}
	key := s.key(m)
	addr, known := s.leases[key]
	typ := dhcpv4.MessageTypeAck
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		if !known {
			addr = netip.AddrFrom4([4]byte{198, 18, 180, byte(100 + s.next)})
			s.next++
			s.leases[key] = addr
		}
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if sid := m.ServerIdentifier(); sid != nil && !sid.Equal(serverAddr.Addr().AsSlice()) {
			return // for another server
		}
		want, _ := addr4(m.RequestedIPAddress())
		if s.nak || !known || want != addr {
			typ = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeRelease:
		if ci, _ := addr4(m.ClientIPAddr); known && ci == addr {
			delete(s.leases, key)
		}
		return
	default:
		return
	}
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverAddr.Addr().AsSlice()))}
	if typ == dhcpv4.MessageTypeNak {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptMessage("test server says no")))
	} else {
		mods = append(mods, dhcpv4.WithYourIP(addr.AsSlice()),
			dhcpv4.WithOption(dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))),
			dhcpv4.WithOption(dhcpv4.OptRouter(serverAddr.Addr().AsSlice())),
			dhcpv4.WithOption(dhcpv4.OptDNS(serverAddr.Addr().AsSlice())),
			dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(s.leaseTime)),
			dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(route("198.18.190.0/24", "198.18.180.1"))))
	}
	reply, err := dhcpv4.NewReplyFromRequest(m, mods...)
	if err != nil {
		s.t.Errorf("build reply: %v", err)
		return
	}
	dst := &net.UDPAddr{IP: net.IPv4bcast, Port: clientPort}
	if s.unicastTo != nil && typ != dhcpv4.MessageTypeNak {
		mac, _ := net.ParseMAC(s.unicastTo(addr))
		nl := l.far.NL
		if err := nl.NeighSet(&netlink.Neigh{LinkIndex: l.far.LinkIndex(lanServer), State: netlink.NUD_PERMANENT,
			IP: addr.AsSlice(), HardwareAddr: mac}); err != nil {
			s.t.Errorf("neighbour %s at %s: %v", addr, mac, err)
		}
		dst.IP = addr.AsSlice()
	}
	if _, err := c.WriteTo(reply.ToBytes(), dst); err != nil {
		s.t.Errorf("send %s to %s: %v", typ, dst, err)
	}
}

// saw returns the messages of type typ the server received, with the
// UDP source each came from.
func (s *testServer) saw(typ dhcpv4.MessageType) (ms []*dhcpv4.DHCPv4, from []net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.seen {
		if m.MessageType() == typ {
			ms, from = append(ms, m), append(from, s.peers[i])
		}
	}
	return ms, from
}

// holds reports whether the server holds a lease of addr.
func (s *testServer) holds(addr netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.leases {
		if a == addr {
			return true
		}
	}
	return false
}

// mac is a locally administered MAC numbered n.
func mac(n int) net.HardwareAddr {
	m, _ := net.ParseMAC(fmt.Sprintf("02:42:c6:12:b4:%02x", n))
	return m
}

// openPorts is how many parent sockets the client holds.
func (c *Client) openPorts() int { return c.ports.Open() }

// set changes the server's behaviour.
func (s *testServer) set(change func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change()
}

// tap counts the IPv4 frames to dst on the parent that an ETH_P_ALL
// packet socket sees.
type tap struct {
	mu sync.Mutex
	n  int
}

func (t *tap) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

func newTap(t *testing.T, l *lan, dst net.HardwareAddr) *tap {
	var conn *packet.Conn
	err := inNetns(l.near.Handle(), func() error {
		ifi, err := net.InterfaceByName(lanParent)
		if err == nil {
			conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		}
		return err
	})
	if err != nil {
		t.Fatalf("ETH_P_ALL tap on %s: %v", lanParent, err)
	}
	tp := &tap{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n > ethHeader && string(buf[:6]) == string(dst) && buf[12] == 8 && buf[13] == 0 {
				tp.mu.Lock()
				tp.n++
				tp.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return tp
}
