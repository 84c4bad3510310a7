package dhcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
)

// The state machine against the scriptable server over the in-memory
// wire: no root, no namespaces.

var secondServer = netip.MustParseAddr("198.18.180.2")

func sawTypes(s *itest.DHCPServer, mac net.HardwareAddr) string {
	var seq []string
	for _, m := range s.Messages(itest.From(mac, nil)) {
		a := ""
		if m.Answer != 0 {
			a = m.Answer.String()
		}
		seq = append(seq, m.Type.String()+"->"+a)
	}
	return strings.Join(seq, " ")
}

func TestWireAcquireRenewRelease(t *testing.T) {
	w := newWire(t)
	s := w.serve(itest.DHCPConfig{LeaseTime: time.Minute})
	c := w.client()
	r := Request{Parent: lanParent, MAC: mac(1), ClientID: ClientIDFromName("ep1")}
	l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr != netip.MustParsePrefix("198.18.180.100/24") || l.ServerID != serverAddr.Addr() || l.Gateway() != serverAddr.Addr() || l.LeaseTime != time.Minute {
		t.Fatalf("lease %+v: want 198.18.180.100/24 from %s, gateway it, 1m", l, serverAddr.Addr())
	}
	if _, err := c.Renew(ctxFor(t, 5*time.Second), l, r); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := c.Release(ctxFor(t, time.Second), l, r); err != nil {
		t.Fatal(err)
	}
	if !itest.WaitFor(2*time.Second, func() bool { return len(s.Leases()) == 0 && len(s.Messages(nil)) == 4 }) {
		t.Fatalf("the server still holds %s", s.LeasesString())
	}
	if got, want := sawTypes(s, r.MAC), "DISCOVER->OFFER REQUEST->ACK REQUEST->ACK RELEASE->"; got != want {
		t.Fatalf("the server saw %s, want %s", got, want)
	}
	if c.openPorts() != 0 {
		t.Fatal("the connection stays open after the calls")
	}
	if _, err := c.Acquire(ctxFor(t, time.Second), Request{Parent: "nosuch0", MAC: mac(1)}); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("Acquire on a parent the opener refuses: %v, want its error", err)
	}
}

// A NAK without option 54, or from a server that was not asked, does not
// end the acquisition: the real server's ACK, 50 ms later, is taken.
func TestRogueNAKsIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  itest.DHCPConfig
		note string
	}{
		{"without option 54", itest.DHCPConfig{ID: secondServer, NoOffers: true, NAKAll: true, NAKWithoutID: true}, "without a server identifier"},
		{"from another server", itest.DHCPConfig{ID: secondServer, NoOffers: true, NAKAll: true}, "from server 198.18.180.2, which was not asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWire(t)
			rogue := w.serve(tc.cfg)
			good := w.serve(itest.DHCPConfig{Delay: 50 * time.Millisecond})
			c := w.client()
			r := Request{Parent: lanParent, MAC: mac(1)}
			l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
			if err != nil {
				t.Fatalf("Acquire with a rogue NAK on the LAN: %v", err)
			}
			if _, ok := good.Lease(l.Addr.Addr()); !ok || l.ServerID != serverAddr.Addr() {
				t.Fatalf("lease %+v: the good server does not hold it: %s", l, good.LeasesString())
			}
			// The rogue answers on its own: the good server's ACK says
			// nothing of whether it has yet.
			if !itest.WaitFor(2*time.Second, func() bool { return len(rogue.Messages(itest.OfType(dhcpv4.MessageTypeRequest))) > 0 }) {
				t.Fatal("the rogue server saw no REQUEST: it sent no NAK, the test proves nothing")
			}
			// With the good server silent, the error says what was ignored.
			good.Set(func(c *itest.DHCPConfig) { c.IgnoreRequests = true })
			_, err = c.Acquire(ctxFor(t, 1500*time.Millisecond), Request{Parent: lanParent, MAC: mac(2)})
			if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrNAK) || !strings.Contains(err.Error(), "ignored a DHCPNAK "+strings.SplitN(tc.note, " ", 2)[0]) ||
				!strings.Contains(err.Error(), tc.note) {
				t.Fatalf("Acquire with only a rogue NAK: %v; want ErrNoAnswer saying the NAK %s was ignored", err, tc.note)
			}
		})
	}
}

// A valid NAK during acquisition starts over with a new DISCOVER, half a
// second later; a NAK storm ends after maxRounds with ErrNAK.
func TestNAKDuringAcquisitionStartsOver(t *testing.T) {
	w := newWire(t)
	s := w.serve(itest.DHCPConfig{})
	c := w.client()
	s.NAK(2)
	r := Request{Parent: lanParent, MAC: mac(1)}
	start := time.Now()
	if _, err := c.Acquire(ctxFor(t, 10*time.Second), r); err != nil {
		t.Fatalf("Acquire after two NAKs: %v", err)
	}
	if took := time.Since(start); took < 2*againWait {
		t.Errorf("took %s: want a pause of %s before each new DISCOVER", took, againWait)
	}
	if got, want := sawTypes(s, r.MAC), "DISCOVER->OFFER REQUEST->NAK DISCOVER->OFFER REQUEST->NAK DISCOVER->OFFER REQUEST->ACK"; got != want {
		t.Fatalf("the server saw %s, want %s", got, want)
	}
	s.NAK(1000)
	r.MAC = mac(2)
	_, err := c.Acquire(ctxFor(t, 20*time.Second), r)
	if !errors.Is(err, ErrNAK) || !strings.Contains(err.Error(), "NAKed 5 times") || !strings.Contains(err.Error(), "itest server says no") {
		t.Fatalf("Acquire against a NAK storm: %v, want ErrNAK after %d rounds with the server's message", err, maxRounds)
	}
	if n := len(s.Messages(func(m itest.DHCPMessage) bool {
		return itest.From(r.MAC, nil)(m) && m.Type == dhcpv4.MessageTypeRequest
	})); n != maxRounds {
		t.Fatalf("%d REQUESTs in the NAK storm, want %d", n, maxRounds)
	}
}

// An offer of an address no endpoint may use is DECLINEd (option 50 the
// address, option 54 the server, ciaddr 0) and never REQUESTed; after
// maxRefusals the error names the address and why.
func TestSpecialAddressesDeclined(t *testing.T) {
	for addr, why := range map[string]string{
		"127.0.0.1": "loopback", "0.0.0.1": "0.0.0.0/8", "240.0.0.1": "240.0.0.0/4", "255.255.255.255": "240.0.0.0/4",
		"169.254.7.7": "link-local", "224.0.0.5": "multicast", "198.18.180.0": "network address of its subnet 198.18.180.0/24",
		"198.18.180.255": "broadcast address of its subnet", "198.18.180.1": "the server's own address",
	} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			w := newWire(t)
			bad := netip.MustParseAddr(addr)
			s := w.serve(itest.DHCPConfig{Offer: bad})
			r := Request{Parent: lanParent, MAC: mac(1)}
			_, err := w.client().Acquire(ctxFor(t, 10*time.Second), r)
			if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), addr+" offered by server 198.18.180.1: "+addr+" is") ||
				!strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "(declined)") {
				t.Fatalf("Acquire offered %s: %v; want ErrUnusable naming it, saying %q and that it was declined", addr, err, why)
			}
			var decl []itest.DHCPMessage
			itest.WaitFor(2*time.Second, func() bool {
				decl = s.Messages(itest.OfType(dhcpv4.MessageTypeDecline))
				return len(decl) >= maxRefusals
			})
			if len(decl) != maxRefusals || len(s.Messages(itest.OfType(dhcpv4.MessageTypeRequest))) != 0 {
				t.Fatalf("the server saw:\n%s\nwant %d DECLINEs and no REQUEST", s.MessagesString(), maxRefusals)
			}
			d := decl[0]
			if d.Requested != bad || d.ServerID != serverAddr.Addr() || (d.ClientIP.IsValid() && !d.ClientIP.IsUnspecified()) || !strings.Contains(d.Message, why) {
				t.Fatalf("DECLINE %s: want option 50 %s, option 54 %s, ciaddr 0 and option 56 saying %q", d, bad, serverAddr.Addr(), why)
			}
		})
	}
}

// After a DECLINE the client asks again and takes the next, good offer.
func TestDeclinedThenGood(t *testing.T) {
	w := newWire(t)
	var once sync.Once
	s := w.serve(itest.DHCPConfig{Tamper: func(req, reply *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
		once.Do(func() { reply.YourIPAddr = net.ParseIP("127.0.0.1") })
		return reply
	}})
	l, err := w.client().Acquire(ctxFor(t, 5*time.Second), Request{Parent: lanParent, MAC: mac(1)})
	if err != nil || l.Addr.Addr() != netip.MustParseAddr("198.18.180.100") {
		t.Fatalf("Acquire: %v, %v; want 198.18.180.100 after declining 127.0.0.1", l.Addr, err)
	}
	if got, want := sawTypes(s, mac(1)), "DISCOVER->OFFER DECLINE-> DISCOVER->OFFER REQUEST->ACK"; got != want {
		t.Fatalf("the server saw %s, want %s", got, want)
	}
}

// An ACK refused for its terms (a mask below /8, a lease under 10 s) is
// RELEASEd, not declined; the server is left with no lease.
func TestRefusedACKReleased(t *testing.T) {
	for name, tamper := range map[string]func(*dhcpv4.DHCPv4){
		"mask /4":                           func(m *dhcpv4.DHCPv4) { m.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(4, 32))) },
		"mask /0":                           func(m *dhcpv4.DHCPv4) { m.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(0, 32))) },
		"lease 0 s":                         func(m *dhcpv4.DHCPv4) { m.UpdateOption(dhcpv4.OptIPAddressLeaseTime(0)) },
		"lease 9 s":                         func(m *dhcpv4.DHCPv4) { m.UpdateOption(dhcpv4.OptIPAddressLeaseTime(9 * time.Second)) },
		"network address by the ACK's mask": func(m *dhcpv4.DHCPv4) { m.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(30, 32))) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWire(t)
			s := w.serve(itest.DHCPConfig{Tamper: func(req, reply *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
				if reply.MessageType() == dhcpv4.MessageTypeAck {
					tamper(reply)
				}
				return reply
			}})
			l, err := w.client().Acquire(ctxFor(t, 15*time.Second), Request{Parent: lanParent, MAC: mac(1)})
			if strings.HasPrefix(name, "network") {
				// 198.18.180.100/30 is a network address: declined; the
				// next offer, .101/30, is fine.
				d := s.Messages(itest.OfType(dhcpv4.MessageTypeDecline))
				if err != nil || l.Addr != netip.MustParsePrefix("198.18.180.101/30") || len(d) != 1 || d[0].Requested != netip.MustParseAddr("198.18.180.100") ||
					!strings.Contains(d[0].Message, "network address of its subnet 198.18.180.100/30") {
					t.Fatalf("Acquire: %v, %v; want 198.18.180.101/30 after declining .100:\n%s", l.Addr, err, s.MessagesString())
				}
				return
			}
			if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "acknowledged by server") {
				t.Fatalf("Acquire: %v, want ErrUnusable naming the acknowledged lease", err)
			}
			released := itest.WaitFor(2*time.Second, func() bool { return len(s.Leases()) == 0 })
			if !strings.Contains(err.Error(), "(released)") || len(s.Messages(itest.OfType(dhcpv4.MessageTypeDecline))) != 0 || !released {
				t.Fatalf("%v; want it released, not declined, and no lease left:\n%s", err, s.MessagesString())
			}
		})
	}
}

// An offer of a lease under MinLeaseTime is not REQUESTed.
func TestShortLeaseOfferRefused(t *testing.T) {
	w := newWire(t)
	s := w.serve(itest.DHCPConfig{LeaseTime: time.Second})
	_, err := w.client().Acquire(ctxFor(t, 5*time.Second), Request{Parent: lanParent, MAC: mac(1)})
	if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "is for 1s (option 51), under the 10s") {
		t.Fatalf("Acquire of a 1 s lease: %v, want ErrUnusable saying it is under 10s", err)
	}
	if n := len(s.Messages(itest.OfType(dhcpv4.MessageTypeRequest))); n != 0 || len(s.Messages(itest.OfType(dhcpv4.MessageTypeDecline))) != 0 {
		t.Fatalf("the server saw:\n%s\nwant no REQUEST, no DECLINE", s.MessagesString())
	}
}

// Request.Only: another address offered is not REQUESTed, and the error
// wraps ErrNotOffered naming it; the address itself is taken.
func TestOnly(t *testing.T) {
	w := newWire(t)
	s := w.serve(itest.DHCPConfig{Offer: netip.MustParseAddr("198.18.180.100")})
	c := w.client()
	want := netip.MustParseAddr("198.18.180.120")
	_, err := c.Acquire(ctxFor(t, 1500*time.Millisecond), Request{Parent: lanParent, MAC: mac(1), Only: want})
	if !errors.Is(err, ErrNotOffered) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "asked for 198.18.180.120 only") ||
		!strings.Contains(err.Error(), "198.18.180.100 by server 198.18.180.1 instead (not taken)") {
		t.Fatalf("Acquire for only %s: %v, want ErrNotOffered naming the offer", want, err)
	}
	ds := s.Messages(itest.OfType(dhcpv4.MessageTypeDiscover))
	if len(ds) == 0 || ds[0].Requested != want || len(s.Messages(itest.OfType(dhcpv4.MessageTypeRequest))) != 0 {
		t.Fatalf("the server saw:\n%s\nwant DISCOVERs asking for %s and no REQUEST", s.MessagesString(), want)
	}
	s.Set(func(c *itest.DHCPConfig) { c.Offer = want })
	l, err := c.Acquire(ctxFor(t, 5*time.Second), Request{Parent: lanParent, MAC: mac(1), Only: want})
	if err != nil || l.Addr.Addr() != want {
		t.Fatalf("Acquire for only %s when it is offered: %v, %v", want, l.Addr, err)
	}
}

// A reply too large for a frame arrives IP-fragmented; the error says so.
func TestFragmentedReply(t *testing.T) {
	w := newWire(t)
	var routes []itest.DHCPRoute
	for i := range 170 {
		routes = append(routes, itest.DHCPRoute{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 24), Gateway: serverAddr.Addr()})
	}
	s := w.serve(itest.DHCPConfig{Routes: routes})
	_, err := w.client().Acquire(ctxFor(t, 1500*time.Millisecond), Request{Parent: lanParent, MAC: mac(1)})
	if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, ErrFragmented) || !strings.Contains(err.Error(), "a DHCP reply came IP-fragmented (") || !strings.Contains(err.Error(), " bytes from 198.18.180.1), and fragments are not reassembled") ||
		!strings.Contains(err.Error(), "fewer option 121 routes") {
		t.Fatalf("Acquire with a fragmented OFFER: %v, want ErrNoAnswer and ErrFragmented saying so", err)
	}
	if len(s.Messages(itest.OfType(dhcpv4.MessageTypeDiscover))) == 0 {
		t.Fatal("the server saw no DISCOVER")
	}
	s.Set(func(c *itest.DHCPConfig) { c.Routes = routes[:20] })
	if l, err := w.client().Acquire(ctxFor(t, 5*time.Second), Request{Parent: lanParent, MAC: mac(1)}); err != nil || len(l.Routes) != 20 {
		t.Fatalf("with 20 routes: %v, %d routes", err, len(l.Routes))
	}
}

// Acquisitions on one parent overlap: 32 against a server that answers
// each message 150 ms late take about 2×150 ms, not 32×2×150 ms.
func TestConcurrentAcquisitionsOverlap(t *testing.T) {
	w := newWire(t)
	w.serve(itest.DHCPConfig{Delay: 150 * time.Millisecond, Size: 64})
	c := New(WithConn(w.open)) // the default retransmission, 2 s
	var reqs []Request
	for i := range 32 {
		reqs = append(reqs, Request{Parent: lanParent, MAC: mac(i + 1)})
	}
	start := time.Now()
	acquireAll(t, c, reqs)
	took := time.Since(start)
	t.Logf("32 concurrent acquisitions took %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("32 concurrent acquisitions took %s: want them to overlap (< 5s)", took)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened != 1 {
		t.Errorf("the parent's connection was opened %d times: want one shared", w.opened)
	}
}

// Decline: the server gets a DECLINE of the lease (options 50, 54, 56,
// ciaddr 0), and the next Acquire gets another address.
func TestDecline(t *testing.T) {
	w := newWire(t)
	s := w.serve(itest.DHCPConfig{})
	c := w.client()
	r := Request{Parent: lanParent, MAC: mac(1), ClientID: ClientIDFromName("ep")}
	l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Decline(ctxFor(t, time.Second), l, r); err != nil {
		t.Fatal(err)
	}
	if !itest.WaitFor(2*time.Second, func() bool { return s.Declined(l.Addr.Addr()) }) {
		t.Fatalf("the server did not take the DECLINE:\n%s", s.MessagesString())
	}
	d := s.Messages(itest.OfType(dhcpv4.MessageTypeDecline))[0]
	if d.Requested != l.Addr.Addr() || d.ServerID != l.ServerID || d.ClientIP != netip.IPv4Unspecified() || d.Message != "address in use" || string(d.ClientID) != string(r.ClientID) {
		t.Fatalf("DECLINE %s: want option 50 %s, option 54 %s, ciaddr 0, option 56 \"address in use\", option 61", d, l.Addr.Addr(), l.ServerID)
	}
	again, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil || again.Addr.Addr() == l.Addr.Addr() {
		t.Fatalf("Acquire after the DECLINE: %v, %v; want another address than %s", again.Addr, err, l.Addr)
	}
	if err := c.Decline(ctxFor(t, time.Second), Lease{}, r); err == nil || !strings.Contains(err.Error(), "lacks an IPv4 address") {
		t.Fatalf("Decline of an empty lease: %v", err)
	}
}
