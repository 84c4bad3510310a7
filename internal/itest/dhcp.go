package itest

// A test LAN with a DHCP server, for the DHCP tests of the daemon
// (test/integration/dhcp_test.go, vm_dhcp_test.go): a parent link in the
// daemon's namespace whose far end, in a namespace of the LAN's own, holds
// the server's address, and an in-process DHCPv4 server there (the
// library's server4) whose leases the tests read: the server's own view of
// what it handed out, renewed and got back.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
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
	// the DHCP server's identifier and the LAN's router.
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
	srv := far.MustLink(LANServerLink)
	if err := far.NL.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: server.Addr().AsSlice(), Mask: net.CIDRMask(server.Bits(), 32)}}); err != nil {
		t.Fatalf("address %s on %s: %v", server, LANServerLink, err)
	}
	far.Up(LANServerLink)
	return &LAN{t: t, Near: near, Far: far, Parent: parent, Server: server}
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

// DHCPConfig is what the server hands out.
type DHCPConfig struct {
	// LeaseTime is option 51; T1 and T2 are left to the client's
	// defaults (half and 7/8 of it).
	LeaseTime time.Duration
	// First is the first address of the pool (the LAN's .100 by default);
	// Size is how many addresses it holds (50 by default).
	First netip.Addr
	Size  int
	// Router is option 3 (the LAN's server address by default; set NoRouter to send none).
	Router   netip.Addr
	NoRouter bool
	// Routes is option 121 (RFC 3442), sent when not empty: destination
	// prefix to gateway, in order.
	Routes []DHCPRoute
}

// DHCPRoute is one classless static route.
type DHCPRoute struct {
	Dst     netip.Prefix
	Gateway netip.Addr
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
	// Answer is the reply's type (OFFER, ACK, NAK), 0 when none was sent.
	Answer dhcpv4.MessageType
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
	if m.Answer != 0 {
		s += " -> " + m.Answer.String()
	}
	return s
}

// DHCPServer is an in-process DHCPv4 server on the LAN's far end. It tells
// clients apart by option 61 when they send it, else by chaddr (as RFC
// 2131 asks); it answers by broadcast. A DISCOVER gets the client's
// current address, else the address it asks for (option 50) when that is
// in the pool and free, else the lowest free one. A REQUEST is ACKed when
// it asks for the address the server holds or offered for that client,
// and NAKed otherwise (or when NAK says so). A RELEASE from the leased
// address frees it. Leases do not expire by themselves: tests compare
// their Expiry with the clock.
type DHCPServer struct {
	t    testing.TB
	lan  *LAN
	cfg  DHCPConfig
	mu   sync.Mutex
	held map[string]*ServerLease // by client key
	offd map[string]netip.Addr   // offered, not yet requested
	naks int
	msgs []DHCPMessage
}

// Serve starts a DHCP server on the LAN; it stops at cleanup, and its
// messages are logged if the test failed.
func (l *LAN) Serve(cfg DHCPConfig) *DHCPServer {
	l.t.Helper()
	if cfg.LeaseTime == 0 {
		cfg.LeaseTime = 20 * time.Second
	}
	if !cfg.First.IsValid() {
		a := l.Server.Masked().Addr().As4()
		a[3] = 100
		cfg.First = netip.AddrFrom4(a)
	}
	if cfg.Size == 0 {
		cfg.Size = 50
	}
	if !cfg.Router.IsValid() && !cfg.NoRouter {
		cfg.Router = l.Server.Addr()
	}
	s := &DHCPServer{t: l.t, lan: l, cfg: cfg, held: map[string]*ServerLease{}, offd: map[string]netip.Addr{}}
	var conn *net.UDPConn
	if err := l.Far.Do(func() (err error) {
		conn, err = server4.NewIPv4UDPConn(LANServerLink, &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	}); err != nil {
		l.t.Fatalf("DHCP server socket on %s: %v", LANServerLink, err)
	}
	srv, err := server4.NewServer("", nil, s.handle, server4.WithConn(conn))
	if err != nil {
		l.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	l.t.Cleanup(func() {
		_ = srv.Close()
		<-done
		if l.t.Failed() {
			l.t.Logf("DHCP server on %s: messages:\n%s\nleases:\n%s", l.Parent, s.MessagesString(), s.LeasesString())
		}
	})
	return s
}

// key tells clients apart: option 61, else chaddr.
func key(m *dhcpv4.DHCPv4) string {
	if id := m.Options.Get(dhcpv4.OptionClientIdentifier); id != nil {
		return "id " + hex.EncodeToString(id)
	}
	return "mac " + m.ClientHWAddr.String()
}

func addrOf(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip.To4())
	if !ok || ip == nil {
		return netip.Addr{}
	}
	return a
}

func (s *DHCPServer) inPool(a netip.Addr) bool {
	for i, p := 0, s.cfg.First; i < s.cfg.Size; i, p = i+1, p.Next() {
		if p == a {
			return true
		}
	}
	return false
}

// taken reports whether a is held or offered for a client other than k.
func (s *DHCPServer) taken(a netip.Addr, k string) bool {
	for other, l := range s.held {
		if other != k && l.Addr == a {
			return true
		}
	}
	for other, o := range s.offd {
		if other != k && o == a {
			return true
		}
	}
	return false
}

func (s *DHCPServer) handle(c net.PacketConn, _ net.Addr, m *dhcpv4.DHCPv4) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := DHCPMessage{At: time.Now(), Type: m.MessageType(), MAC: append(net.HardwareAddr(nil), m.ClientHWAddr...),
		Broadcast: m.IsBroadcast(), Requested: addrOf(m.RequestedIPAddress()), ServerID: addrOf(m.ServerIdentifier()), ClientIP: addrOf(m.ClientIPAddr)}
	if id := m.Options.Get(dhcpv4.OptionClientIdentifier); id != nil {
		rec.ClientID = append([]byte(nil), id...)
	}
	defer func() { s.msgs = append(s.msgs, rec) }()
	k := key(m)
	var addr netip.Addr
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		switch {
		case s.held[k] != nil:
			addr = s.held[k].Addr
		case rec.Requested.IsValid() && s.inPool(rec.Requested) && !s.taken(rec.Requested, k):
			addr = rec.Requested
		default:
			for i, p := 0, s.cfg.First; i < s.cfg.Size; i, p = i+1, p.Next() {
				if !s.taken(p, k) {
					addr = p
					break
				}
			}
			if !addr.IsValid() {
				return // pool exhausted: no OFFER
			}
		}
		s.offd[k] = addr
		rec.Answer = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if rec.ServerID.IsValid() && rec.ServerID != s.lan.Server.Addr() {
			delete(s.offd, k) // the client took another server's offer
			return
		}
		want := rec.Requested
		if !want.IsValid() {
			want = rec.ClientIP
		}
		held, offered := s.held[k], s.offd[k]
		switch {
		case s.naks > 0:
			s.naks--
			delete(s.held, k) // the address is no longer the client's
			delete(s.offd, k)
			rec.Answer = dhcpv4.MessageTypeNak
		case want.IsValid() && ((held != nil && held.Addr == want) || offered == want):
			addr = want
			rec.Answer = dhcpv4.MessageTypeAck
			now := time.Now()
			if held == nil || held.Addr != want {
				held = &ServerLease{Addr: want, MAC: rec.MAC, ClientID: rec.ClientID}
				s.held[k] = held
			}
			held.Granted, held.Expiry = now, now.Add(s.cfg.LeaseTime)
			held.Acks++
			delete(s.offd, k)
		default:
			rec.Answer = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeRelease:
		if l := s.held[k]; l != nil && l.Addr == rec.ClientIP {
			delete(s.held, k)
		}
		return
	default:
		return
	}
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(rec.Answer), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.lan.Server.Addr().AsSlice()))}
	if rec.Answer == dhcpv4.MessageTypeNak {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptMessage("itest server says no")))
	} else {
		mods = append(mods, dhcpv4.WithYourIP(addr.AsSlice()),
			dhcpv4.WithOption(dhcpv4.OptSubnetMask(net.CIDRMask(s.lan.Server.Bits(), 32))),
			dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(s.cfg.LeaseTime)))
		if s.cfg.Router.IsValid() {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRouter(s.cfg.Router.AsSlice())))
		}
		if len(s.cfg.Routes) > 0 {
			var rs []*dhcpv4.Route
			for _, r := range s.cfg.Routes {
				rs = append(rs, &dhcpv4.Route{Dest: &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), 32)}, Router: r.Gateway.AsSlice()})
			}
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(rs...)))
		}
	}
	reply, err := dhcpv4.NewReplyFromRequest(m, mods...)
	if err != nil {
		s.t.Errorf("DHCP server: build %s: %v", rec.Answer, err)
		return
	}
	if _, err := c.WriteTo(reply.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}); err != nil {
		s.t.Errorf("DHCP server: send %s: %v", rec.Answer, err)
	}
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
