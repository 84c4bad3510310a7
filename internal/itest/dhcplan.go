package itest

// A test LAN with a DHCP server, for the DHCP tests of the daemon
// (test/integration/dhcp_test.go, dhcp_hostile_*_test.go, vm_dhcp_test.go):
// a parent link in the daemon's namespace whose far end, in a namespace of
// the LAN's own, holds the server's address, and in-process DHCPv4 servers
// there (DHCPServer, dhcpserver.go) whose leases and messages the tests
// read: the servers' own view of what they handed out, renewed and got back.

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/vishvananda/netlink"
)

// LANServerLink is the name of the LAN's far end, in the LAN's namespace.
const LANServerLink = "srv0"

// LAN is a test LAN: Parent, one end of a veth in the near namespace (the
// daemon's), and its peer LANServerLink with the server's address Server
// in Far, a namespace of the LAN's own. Nothing runs on it until Serve.
type LAN struct {
	t      testing.TB
	Near   *Netns
	Far    *Netns
	Parent string
	// Server is the far end's address with the LAN's prefix length; it is
	// the DHCP server's identifier and the LAN's router by default.
	Server netip.Prefix
}

// NewLAN makes the LAN: parent (up) in near, its peer in a new namespace
// with server on it (up).
func NewLAN(t testing.TB, near *Netns, parent string, server netip.Prefix) *LAN {
	t.Helper()
	far := NewNetns(t)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: parent, MTU: 1500}, PeerName: LANServerLink, PeerNamespace: netlink.NsFd(int(far.Handle()))}
	if err := near.NL.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s with its peer %s in the LAN's namespace: %v", parent, LANServerLink, err)
	}
	near.Up(parent)
	serverAddr(t, far, server)
	return &LAN{t: t, Near: near, Far: far, Parent: parent, Server: server}
}

// NewVLANLAN is NewLAN on 802.1Q VLAN vid (a kernel with 8021q only): base
// (up) in near, its peer "trunk0" in the LAN's namespace with the VLAN
// link LANServerLink on it holding server. Parent is base.vid, the VLAN
// the daemon is to make on base (-o parent=base.vid).
func NewVLANLAN(t testing.TB, near *Netns, base string, vid int, server netip.Prefix) *LAN {
	t.Helper()
	far := NewNetns(t)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: base, MTU: 1500}, PeerName: "trunk0", PeerNamespace: netlink.NsFd(int(far.Handle()))}
	if err := near.NL.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s with its peer trunk0 in the LAN's namespace: %v", base, err)
	}
	near.Up(base)
	far.Up("trunk0")
	far.AddVLAN(LANServerLink, "trunk0", vid)
	serverAddr(t, far, server)
	return &LAN{t: t, Near: near, Far: far, Parent: fmt.Sprintf("%s.%d", base, vid), Server: server}
}

// serverAddr puts server on the LAN's far end and sets it up.
func serverAddr(t testing.TB, far *Netns, server netip.Prefix) {
	t.Helper()
	srv := far.MustLink(LANServerLink)
	if err := far.NL.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: server.Addr().AsSlice(), Mask: net.CIDRMask(server.Bits(), 32)}}); err != nil {
		t.Fatalf("address %s on %s: %v", server, LANServerLink, err)
	}
	far.Up(LANServerLink)
}

// DHCPNetwork is the CreateNetwork request libnetwork sends for
// `docker network create -d underlay --ipam-driver null -o parent=PARENT
// -o dhcp=true [-o k=v ...]`: the generic options and the null IPAM's one
// IPv4 pool 0.0.0.0/0 in the address space "null", no gateway.
func DHCPNetwork(id, parent string, opts ...string) *network.CreateNetworkRequest {
	generic := map[string]any{"parent": parent, "dhcp": "true"}
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		generic[k] = v
	}
	return &network.CreateNetworkRequest{NetworkID: id,
		Options:  map[string]any{"com.docker.network.generic": generic},
		IPv4Data: []*network.IPAMData{{AddressSpace: "null", Pool: "0.0.0.0/0"}}}
}

// Serve starts a DHCP server on the LAN, on a UDP socket of its own on
// the far end (several servers, with other IDs, can serve one LAN: each
// gets every broadcast); it stops at cleanup, and its messages are logged
// if the test failed.
func (l *LAN) Serve(cfg DHCPConfig) *DHCPServer {
	l.t.Helper()
	s := NewDHCPServer(l.t, l.Server, cfg)
	var conn *net.UDPConn
	if err := l.Far.Do(func() (err error) {
		conn, err = server4.NewIPv4UDPConn(LANServerLink, &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	}); err != nil {
		l.t.Fatalf("DHCP server socket on %s: %v", LANServerLink, err)
	}
	l.t.Cleanup(func() {
		if l.t.Failed() {
			l.t.Logf("DHCP server %s on %s: messages:\n%s\nleases:\n%s", s.ID(), l.Parent, s.MessagesString(), s.LeasesString())
		}
	})
	s.ServeConn(conn) // its cleanup runs first
	return s
}

// ServerLease is a lease as the server holds it.
type ServerLease struct {
	Addr     netip.Addr
	MAC      net.HardwareAddr
	ClientID []byte // option 61 as received, nil without one
	// Granted is when the last ACK for it was sent, Expiry that plus the
	// lease time; Acks counts the ACKs for it (1 + the renewals).
	Granted, Expiry time.Time
	Acks            int
}

// DHCPMessage is one message the server received, and what it answered.
type DHCPMessage struct {
	At        time.Time
	Type      dhcpv4.MessageType
	MAC       net.HardwareAddr
	ClientID  []byte
	Broadcast bool       // the BROADCAST flag
	Requested netip.Addr // option 50
	ServerID  netip.Addr // option 54
	ClientIP  netip.Addr // ciaddr
	Message   string     // option 56
	// Answer is the reply's type (OFFER, ACK, NAK), 0 when none was sent.
	Answer dhcpv4.MessageType
	// Offered is the answer's yiaddr (OFFER, ACK).
	Offered netip.Addr
}

func (m DHCPMessage) String() string {
	s := fmt.Sprintf("%s %s from %s", m.At.Format("15:04:05.000"), m.Type, m.MAC)
	if m.ClientID != nil {
		s += fmt.Sprintf(" id %x", m.ClientID)
	}
	if m.Requested.IsValid() {
		s += " requested " + m.Requested.String()
	}
	if m.ServerID.IsValid() {
		s += " server " + m.ServerID.String()
	}
	if m.ClientIP.IsValid() && !m.ClientIP.IsUnspecified() {
		s += " ciaddr " + m.ClientIP.String()
	}
	if m.Message != "" {
		s += fmt.Sprintf(" message %q", m.Message)
	}
	if m.Answer != 0 {
		s += " -> " + m.Answer.String()
		if m.Offered.IsValid() {
			s += " " + m.Offered.String()
		}
	}
	return s
}

// Set changes the server's configuration while it serves.
func (s *DHCPServer) Set(change func(*DHCPConfig)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(&s.cfg)
}

// ID is the server's identifier (option 54).
func (s *DHCPServer) ID() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.ID
}

// NAK makes the server refuse the next n REQUESTs with a DHCPNAK and
// forget the lease of each client it refuses (its address is free again).
func (s *DHCPServer) NAK(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.naks = n
}

// Leases returns the leases the server holds, by address.
func (s *DHCPServer) Leases() []ServerLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ServerLease
	for _, l := range s.held {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out
}

// Lease returns the server's lease of addr.
func (s *DHCPServer) Lease(addr netip.Addr) (ServerLease, bool) {
	for _, l := range s.Leases() {
		if l.Addr == addr {
			return l, true
		}
	}
	return ServerLease{}, false
}

// Declined reports whether a client declined addr to this server.
func (s *DHCPServer) Declined(addr netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad[addr]
}

// Messages returns every message the server received, in order, those
// for which match (nil: all) is true.
func (s *DHCPServer) Messages(match func(DHCPMessage) bool) []DHCPMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []DHCPMessage
	for _, m := range s.msgs {
		if match == nil || match(m) {
			out = append(out, m)
		}
	}
	return out
}

// From matches the messages of a client: chaddr mac and, when id is not
// nil, option 61 id.
func From(mac net.HardwareAddr, id []byte) func(DHCPMessage) bool {
	return func(m DHCPMessage) bool {
		return bytes.Equal(m.MAC, mac) && (id == nil || bytes.Equal(m.ClientID, id))
	}
}

// OfType matches the messages of type t.
func OfType(t dhcpv4.MessageType) func(DHCPMessage) bool {
	return func(m DHCPMessage) bool { return m.Type == t }
}

// MessagesString is every message received, one a line.
func (s *DHCPServer) MessagesString() string {
	var b strings.Builder
	for _, m := range s.Messages(nil) {
		b.WriteString("  " + m.String() + "\n")
	}
	return b.String()
}

// LeasesString is every lease held, one a line.
func (s *DHCPServer) LeasesString() string {
	var b strings.Builder
	for _, l := range s.Leases() {
		fmt.Fprintf(&b, "  %s to %s id %x granted %s expires %s (%d ACKs)\n", l.Addr, l.MAC, l.ClientID,
			l.Granted.Format("15:04:05.000"), l.Expiry.Format("15:04:05.000"), l.Acks)
	}
	return b.String()
}

// WaitFor polls cond every 20 ms until it holds or timeout passes; it
// reports whether it held.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
