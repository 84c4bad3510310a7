package itest

// A scriptable DHCPv4 server for the DHCP tests: well-behaved by default
// (a pool, leases by client, NAKs on demand), hostile when told (the same
// address offered to everyone, special addresses, NAKs without option 54
// or for other servers' clients, silence, slow answers, replies that do
// not fit a frame, anything Tamper makes of an answer). It runs the
// library's server4 over any connection of DHCP payloads: a UDP socket on
// a test LAN's far end (LAN.Serve), or an in-memory wire (the dhcp
// package's unit tests). It records every message it gets, and its leases.

import (
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// DHCPConfig is what the server hands out, and how it misbehaves.
type DHCPConfig struct {
	// LeaseTime is option 51 (20 s by default); T1 and T2 are left to the
	// client's defaults unless Times says them.
	LeaseTime time.Duration
	// First is the first address of the pool (the LAN's .100 by default);
	// Size is how many addresses it holds (50 by default).
	First netip.Addr
	Size  int
	// Router is option 3 (the LAN's server address by default; set NoRouter to send none).
	Router   netip.Addr
	NoRouter bool
	// Routes is option 121 (RFC 3442), sent when not empty: destination
	// prefix to gateway, in order. Some 150 of them make a reply larger
	// than a 1500-byte frame, which the kernel sends IP-fragmented.
	Routes []DHCPRoute

	// ID is the server identifier (option 54) it sends and answers to
	// (the LAN's server address by default): two servers with other IDs
	// can serve one LAN.
	ID netip.Addr
	// Offer, when set, is offered and acknowledged to every client,
	// whoever holds it and whether or not it was declined (a rogue
	// server; a special address such as 127.0.0.1 too).
	Offer netip.Addr
	// Times, when set, are options 58 and 59 (T1, T2) as sent, zero too.
	Times *[2]time.Duration
	// Delay holds back each answer; answers overlap (the server keeps
	// reading while they wait).
	Delay time.Duration
	// IgnoreRequests leaves REQUESTs (renewals too) unanswered; NoOffers
	// leaves DISCOVERs unanswered.
	IgnoreRequests, NoOffers bool
	// NAKAll NAKs every REQUEST, also those naming another server.
	NAKAll bool
	// NAKWithoutID leaves option 54 out of its NAKs (RFC 2131 requires it).
	NAKWithoutID bool
	// Tamper, when set, gets each answer before it is sent, with the
	// message it answers, and returns what to send instead (nil: nothing).
	Tamper func(req, reply *dhcpv4.DHCPv4) *dhcpv4.DHCPv4
}

// DHCPRoute is one classless static route.
type DHCPRoute struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// DHCPServer is an in-process DHCPv4 server. It tells clients apart by
// option 61 when they send it, else by chaddr (as RFC 2131 asks); it
// answers by broadcast. A DISCOVER gets the client's current address, else
// the address it asks for (option 50) when that is in the pool and free,
// else the lowest free one; declined addresses are never offered again. A
// REQUEST naming another server withdraws the offer; one for the address
// the server holds or offered for that client is ACKed, else NAKed (or
// when NAK says so). A RELEASE from the leased address frees it; a DECLINE
// to this server frees it and marks it declined. Leases do not expire by
// themselves: tests compare their Expiry with the clock.
type DHCPServer struct {
	t      testing.TB
	prefix netip.Prefix // the server's address on the LAN, with the LAN's length
	mu     sync.Mutex
	cfg    DHCPConfig
	held   map[string]*ServerLease // by client key
	offd   map[string]netip.Addr   // offered, not yet requested
	bad    map[netip.Addr]bool     // declined
	naks   int
	msgs   []DHCPMessage
	done   bool           // stopped: delayed answers are dropped
	later  sync.WaitGroup // delayed answers
}

// NewDHCPServer makes a server for the LAN of prefix (the server's
// address with the LAN's length), with cfg's defaults filled in; it
// serves nothing until ServeConn.
func NewDHCPServer(t testing.TB, prefix netip.Prefix, cfg DHCPConfig) *DHCPServer {
	if cfg.LeaseTime == 0 {
		cfg.LeaseTime = 20 * time.Second
	}
	if !cfg.First.IsValid() {
		a := prefix.Masked().Addr().As4()
		a[3] = 100
		cfg.First = netip.AddrFrom4(a)
	}
	if cfg.Size == 0 {
		cfg.Size = 50
	}
	if !cfg.Router.IsValid() && !cfg.NoRouter {
		cfg.Router = prefix.Addr()
	}
	if !cfg.ID.IsValid() {
		cfg.ID = prefix.Addr()
	}
	return &DHCPServer{t: t, prefix: prefix, cfg: cfg, held: map[string]*ServerLease{}, offd: map[string]netip.Addr{}, bad: map[netip.Addr]bool{}}
}

// ServeConn serves DHCP over conn (DHCP payloads from and to *net.UDPAddr
// peers, as a UDP socket on port 67) until the test's cleanup, which
// also waits for the delayed answers to be dropped.
func (s *DHCPServer) ServeConn(conn net.PacketConn) {
	srv, err := server4.NewServer("", nil, s.handle, server4.WithConn(conn))
	if err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	s.t.Cleanup(func() {
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
		_ = srv.Close()
		<-done
		s.later.Wait()
	})
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

// taken reports whether a is declined, or held or offered for a client
// other than k.
func (s *DHCPServer) taken(a netip.Addr, k string) bool {
	if s.bad[a] {
		return true
	}
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

// pick is the address to offer client k asking for want (may be zero).
func (s *DHCPServer) pick(k string, want netip.Addr) netip.Addr {
	if s.cfg.Offer.IsValid() {
		return s.cfg.Offer
	}
	if l := s.held[k]; l != nil {
		return l.Addr
	}
	free := func(a netip.Addr) bool { return !s.taken(a, k) }
	for i, p := 0, s.cfg.First; i < s.cfg.Size; i, p = i+1, p.Next() {
		if p == want && free(p) {
			return p
		}
	}
	for i, p := 0, s.cfg.First; i < s.cfg.Size; i, p = i+1, p.Next() {
		if free(p) {
			return p
		}
	}
	return netip.Addr{} // pool exhausted
}

func (s *DHCPServer) handle(c net.PacketConn, _ net.Addr, m *dhcpv4.DHCPv4) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := DHCPMessage{At: time.Now(), Type: m.MessageType(), MAC: append(net.HardwareAddr(nil), m.ClientHWAddr...), Broadcast: m.IsBroadcast(),
		Requested: addrOf(m.RequestedIPAddress()), ServerID: addrOf(m.ServerIdentifier()), ClientIP: addrOf(m.ClientIPAddr), Message: m.Message()}
	if id := m.Options.Get(dhcpv4.OptionClientIdentifier); id != nil {
		rec.ClientID = append([]byte(nil), id...)
	}
	defer func() { s.msgs = append(s.msgs, rec) }()
	k, cfg := key(m), s.cfg
	var addr netip.Addr
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		if cfg.NoOffers {
			return
		}
		if addr = s.pick(k, rec.Requested); !addr.IsValid() {
			return
		}
		s.offd[k] = addr
		rec.Answer = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if cfg.IgnoreRequests {
			return
		}
		if cfg.NAKAll {
			rec.Answer = dhcpv4.MessageTypeNak
			break
		}
		if rec.ServerID.IsValid() && rec.ServerID != cfg.ID {
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
		case want.IsValid() && ((held != nil && held.Addr == want) || offered == want || want == cfg.Offer):
			addr = want
			rec.Answer = dhcpv4.MessageTypeAck
			now := time.Now()
			if held == nil || held.Addr != want {
				held = &ServerLease{Addr: want, MAC: rec.MAC, ClientID: rec.ClientID}
				s.held[k] = held
			}
			held.Granted, held.Expiry = now, now.Add(cfg.LeaseTime)
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
	case dhcpv4.MessageTypeDecline:
		if rec.ServerID == cfg.ID && rec.Requested.IsValid() {
			s.bad[rec.Requested] = true
			for other, l := range s.held {
				if l.Addr == rec.Requested {
					delete(s.held, other)
				}
			}
			for other, o := range s.offd {
				if o == rec.Requested {
					delete(s.offd, other)
				}
			}
		}
		return
	default:
		return
	}
	rec.Offered = addr
	reply, err := s.reply(m, rec.Answer, addr, cfg)
	if err != nil {
		s.t.Errorf("DHCP server %s: build %s: %v", cfg.ID, rec.Answer, err)
		return
	}
	if cfg.Tamper != nil {
		if reply = cfg.Tamper(m, reply); reply == nil {
			rec.Answer, rec.Offered = 0, netip.Addr{}
			return
		}
	}
	b := reply.ToBytes()
	send := func() {
		if s.done {
			return
		}
		if _, err := c.WriteTo(b, &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}); err != nil && !s.done {
			s.t.Errorf("DHCP server %s: send %s: %v", cfg.ID, rec.Answer, err)
		}
	}
	if cfg.Delay <= 0 {
		send()
		return
	}
	s.later.Add(1)
	time.AfterFunc(cfg.Delay, func() {
		defer s.later.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		send()
	})
}

// reply builds the answer of type t to m, for addr.
func (s *DHCPServer) reply(m *dhcpv4.DHCPv4, t dhcpv4.MessageType, addr netip.Addr, cfg DHCPConfig) (*dhcpv4.DHCPv4, error) {
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(t)}
	if t != dhcpv4.MessageTypeNak || !cfg.NAKWithoutID {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(cfg.ID.AsSlice())))
	}
	if t == dhcpv4.MessageTypeNak {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptMessage("itest server says no")))
		return dhcpv4.NewReplyFromRequest(m, mods...)
	}
	mods = append(mods, dhcpv4.WithYourIP(addr.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptSubnetMask(net.CIDRMask(s.prefix.Bits(), 32))),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(cfg.LeaseTime)))
	if cfg.Times != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(cfg.Times[0])), dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(cfg.Times[1])))
	}
	if cfg.Router.IsValid() {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRouter(cfg.Router.AsSlice())))
	}
	if len(cfg.Routes) > 0 {
		var rs []*dhcpv4.Route
		for _, r := range cfg.Routes {
			rs = append(rs, &dhcpv4.Route{Dest: &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), 32)}, Router: r.Gateway.AsSlice()})
		}
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(rs...)))
	}
	return dhcpv4.NewReplyFromRequest(m, mods...)
}
