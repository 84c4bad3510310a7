package dhcp6

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testMAC(i byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0x42, 0xc0, 0xa8, 0x00, i} }

// macvlanReq is a macvlan endpoint's request: DUID-LL of its own MAC.
func macvlanReq(i byte) Request {
	return Request{Parent: testParent, MAC: testMAC(i), DUID: DUIDFromMAC(testMAC(i)), IAID: EndpointIAID(string(rune('a' + i)))}
}

func TestAcquireRenewRebindRelease(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	c := w.client()
	r := macvlanReq(1)
	before := time.Now()
	l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr != netip.MustParseAddr("2001:db8:60::100") || l.Preferred != time.Hour || l.Valid != 2*time.Hour ||
		l.T1 != 30*time.Minute || l.T2 != 48*time.Minute || l.IAID != r.IAID || !bytes.Equal(l.ServerID, s.duid.ToBytes()) || l.Acquired.Before(before) {
		t.Errorf("lease %+v, want 2001:db8:60::100 for 1h/2h, T1 30m, T2 48m, IAID %x, server %x, acquired after %s", l, r.IAID, s.duid.ToBytes(), before)
	}
	if got, ok := s.binding(r.DUID, r.IAID); !ok || got != l.Addr {
		t.Errorf("the server's binding is %s (%v), want %s", got, ok, l.Addr)
	}
	sol, req := s.messages(dhcpv6.MessageTypeSolicit), s.messages(dhcpv6.MessageTypeRequest)
	if len(sol) != 1 || len(req) != 1 || sol[0].GetOneOption(dhcpv6.OptionRapidCommit) != nil {
		t.Fatalf("%d Solicits and %d Requests (want 1, 1, no Rapid Commit)", len(sol), len(req))
	}
	if sid := req[0].Options.ServerID(); sid == nil || !sid.Equal(s.duid) || req[0].Options.OneIANA().Options.OneAddress() == nil {
		t.Errorf("the Request names server %v and IA_NA %v, want %v and the address", sid, req[0].Options.OneIANA(), s.duid)
	}
	if !sameDUID(sol[0].Options.ClientID(), DUIDFromMAC(r.MAC)) || sol[0].Options.OneIANA().IaId != r.IAID {
		t.Errorf("the Solicit's client ID %v, IAID %x, want DUID-LL of %s and %x", sol[0].Options.ClientID(), sol[0].Options.OneIANA().IaId, r.MAC, r.IAID)
	}

	s.set(func(s *fakeServer) { s.valid, s.preferred = 3*time.Hour, 90*time.Minute })
	renewed, err := c.Renew(ctxFor(t, 5*time.Second), l, r)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Addr != l.Addr || renewed.Valid != 3*time.Hour || !renewed.Acquired.After(l.Acquired) {
		t.Errorf("renewed %+v, want %s valid 3h acquired after %s", renewed, l.Addr, l.Acquired)
	}
	if ren := s.messages(dhcpv6.MessageTypeRenew); len(ren) != 1 || ren[0].Options.ServerID() == nil {
		t.Errorf("%d Renews, want 1 naming the server", len(ren))
	}
	rebound, err := c.Rebind(ctxFor(t, 5*time.Second), renewed, r)
	if err != nil {
		t.Fatal(err)
	}
	if reb := s.messages(dhcpv6.MessageTypeRebind); len(reb) != 1 || reb[0].Options.ServerID() != nil || rebound.Addr != l.Addr {
		t.Errorf("%d Rebinds (want 1 naming no server), address %s", len(reb), rebound.Addr)
	}
	if err := c.Release(ctxFor(t, 5*time.Second), rebound, r); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.binding(r.DUID, r.IAID); ok {
		t.Error("the binding stays after the Release")
	}
	if _, err := c.Renew(ctxFor(t, 5*time.Second), rebound, r); !errors.Is(err, ErrNoBinding) {
		t.Errorf("Renew after the Release: %v, want ErrNoBinding", err)
	}
	if n := w.endsClosed(); n != 0 {
		t.Errorf("%d connections stay open after the calls", n)
	}
}

func TestDecline(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	c := w.client()
	r := macvlanReq(1)
	l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Decline(ctxFor(t, 5*time.Second), l, r); err != nil {
		t.Fatal(err)
	}
	if d := s.messages(dhcpv6.MessageTypeDecline); len(d) != 1 || len(s.declined) != 1 || s.declined[0] != l.Addr {
		t.Errorf("%d Declines, declined %v, want 1 of %s", len(d), s.declined, l.Addr)
	}
	again, err := c.Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil || again.Addr == l.Addr {
		t.Errorf("Acquire after Decline: %s, %v; want another address than %s", again.Addr, err, l.Addr)
	}
}

func TestRapidCommit(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	s.set(func(s *fakeServer) { s.rapid = true })
	r := macvlanReq(1)
	// Without WithRapidCommit, a server that would rapid-commit still advertises.
	if _, err := w.client().Acquire(ctxFor(t, 5*time.Second), r); err != nil {
		t.Fatal(err)
	}
	if n := len(s.messages(dhcpv6.MessageTypeRequest)); n != 1 {
		t.Fatalf("%d Requests without rapid commit, want 1", n)
	}
	r2 := macvlanReq(2)
	l, err := w.client(WithRapidCommit()).Acquire(ctxFor(t, 5*time.Second), r2)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.messages(dhcpv6.MessageTypeRequest)); n != 1 {
		t.Errorf("%d Requests, want none more with rapid commit", n-1)
	}
	if got, ok := s.binding(r2.DUID, r2.IAID); !ok || got != l.Addr {
		t.Errorf("binding %s %v, want %s", got, ok, l.Addr)
	}
}

func TestPreferenceChoosesServer(t *testing.T) {
	w := newWire(t)
	low, high := w.serve(1), w.serve(2)
	low.set(func(s *fakeServer) { s.preference = 10 })
	high.set(func(s *fakeServer) { s.preference = 200; s.next = 5 })
	l, err := w.client(WithCollect(200*time.Millisecond)).Acquire(ctxFor(t, 5*time.Second), macvlanReq(1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.ServerID, high.duid.ToBytes()) || l.Addr != netip.MustParseAddr("2001:db8:60::105") {
		t.Errorf("lease from %x for %s, want the preference-200 server's 2001:db8:60::105", l.ServerID, l.Addr)
	}
}

func TestIpvlanEndpointsShareTheMAC(t *testing.T) {
	w := newWire(t)
	w.serve(1)
	c := w.client()
	parent := testMAC(99)
	var leases [8]Lease
	var errs [8]error
	var wg sync.WaitGroup
	for i := range leases {
		id := "endpoint-" + string(rune('a'+i))
		r := Request{Parent: testParent, MAC: parent, DUID: EndpointDUID(id), IAID: EndpointIAID(id)}
		wg.Go(func() { leases[i], errs[i] = c.Acquire(ctxFor(t, 5*time.Second), r) })
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if seen[leases[i].Addr] {
			t.Errorf("two endpoints got %s", leases[i].Addr)
		}
		seen[leases[i].Addr] = true
	}
}

func TestAnswersNeighbourSolicitations(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	r := macvlanReq(7)
	ll := LinkLocal(r.MAC)
	s.set(func(s *fakeServer) {
		s.script = func(in *dhcpv6.Message) []*dhcpv6.Message {
			// The server's kernel resolves the client's link-local address first.
			ns := nsFrame(s.mac, s.ll, ll)
			go w.inject(ns)
			time.Sleep(20 * time.Millisecond)
			return nil
		}
	})
	if _, err := w.client().Acquire(ctxFor(t, 5*time.Second), r); err != nil {
		t.Fatal(err)
	}
	var na []byte
	for _, f := range w.sent() {
		if len(f) > ethHeader+ipv6Header && f[ethHeader+6] == protoICMP6 && f[ethHeader+ipv6Header] == 136 {
			na = f
		}
	}
	if na == nil {
		t.Fatal("no Neighbour Advertisement sent for the endpoint's link-local address")
	}
	ip := na[ethHeader:]
	body := ip[ipv6Header:]
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	if !bytes.Equal(na[0:6], s.mac) || !bytes.Equal(na[6:12], r.MAC) || src != ll || dst != s.ll || ip[7] != 255 ||
		netip.AddrFrom16([16]byte(body[8:24])) != ll || body[4] != 0x60 || !bytes.Equal(body[26:32], r.MAC) {
		t.Errorf("NA %x: want from %s/%s to %s/%s, hop limit 255, S and O, target %s with its MAC", na, r.MAC, ll, s.mac, s.ll, ll)
	}
	if sum(body, pseudo(src, dst, protoICMP6, len(body))) != 0xffff {
		t.Error("bad ICMPv6 checksum")
	}
}

// nsFrame is a Neighbour Solicitation from mac/src for target.
func nsFrame(mac net.HardwareAddr, src, target netip.Addr) []byte {
	body := make([]byte, 24)
	body[0] = 135
	t := target.As16()
	copy(body[8:24], t[:])
	f := make([]byte, ethHeader+ipv6Header+len(body))
	ipHeader(f, mac, solicitedNodeMAC(target), src, netip.MustParseAddr("ff02::1:ff00:0"), protoICMP6, 255, len(body))
	copy(f[ethHeader+ipv6Header:], body)
	return f
}
