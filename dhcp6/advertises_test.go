package dhcp6

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

func (a Advertisement) String() string {
	return fmt.Sprintf("%x %s %s %v %q", a.ServerID, a.ServerMAC, a.Source, a.Addrs, a.Status)
}

// onlySolicits fails unless the servers got only Solicits of one
// transaction, without Rapid Commit, at least min each.
func onlySolicits(t *testing.T, min int, servers ...*fakeServer) {
	t.Helper()
	var xid dhcpv6.TransactionID
	for i, s := range servers {
		s.mu.Lock()
		got := append([]*dhcpv6.Message(nil), s.got...)
		s.mu.Unlock()
		for j, m := range got {
			if i == 0 && j == 0 {
				xid = m.TransactionID
			}
			if m.MessageType != dhcpv6.MessageTypeSolicit || m.TransactionID != xid || m.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
				t.Fatalf("server %d got a %s (xid %s, rapid commit %v): want only Solicits of xid %s without Rapid Commit",
					i+1, m.MessageType, m.TransactionID, m.GetOneOption(dhcpv6.OptionRapidCommit) != nil, xid)
			}
		}
		if len(got) < min {
			t.Fatalf("server %d got %d Solicits, want at least %d (the retransmissions)", i+1, len(got), min)
		}
	}
}

// Three servers answer the Solicit and its retransmissions: one offers
// an address, one has none (NoAddrsAvail), one sends no server
// identifier (ignored). The first two are returned, each once.
func TestAdvertisesEveryServerOnce(t *testing.T) {
	w := newWire(t)
	a, none, anon := w.serve(1), w.serve(2), w.serve(3)
	none.set(func(s *fakeServer) {
		s.edit = func(_, out *dhcpv6.Message) {
			out.Options.Del(dhcpv6.OptionIANA)
			out.AddOption(&dhcpv6.OptIANA{IaId: [4]byte{1}, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
				&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "pool exhausted"}}}})
		}
	})
	anon.set(func(s *fakeServer) { s.edit = func(_, out *dhcpv6.Message) { out.Options.Del(dhcpv6.OptionServerID) } })
	c := w.client()
	r := macvlanReq(1)
	r.Hostname = "web"
	start := time.Now()
	advs, err := c.Advertises(ctxFor(t, 350*time.Millisecond), r)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("Advertises returned after %s, before its context ended (350ms): it must collect until then", took)
	}
	want := []Advertisement{
		{ServerID: a.duid.ToBytes(), ServerMAC: a.mac, Source: a.ll, Addrs: []netip.Addr{netip.MustParseAddr("2001:db8:60::100")}},
		{ServerID: none.duid.ToBytes(), ServerMAC: none.mac, Source: none.ll, Status: "NoAddrsAvail: pool exhausted"},
	}
	if fmt.Sprint(advs) != fmt.Sprint(want) {
		t.Fatalf("advertisements\n%v\nwant\n%v", advs, want)
	}
	onlySolicits(t, 2, a, none, anon)
	sol := a.messages(dhcpv6.MessageTypeSolicit)[0]
	if !sameDUID(sol.Options.ClientID(), r.DUID) || sol.Options.OneIANA() == nil || sol.Options.OneIANA().IaId != r.IAID ||
		sol.GetOneOption(dhcpv6.OptionFQDN) == nil {
		t.Errorf("Solicit %s: want client ID %x, IA_NA %x, the client FQDN", sol.Summary(), r.DUID, r.IAID)
	}
	if _, bound := a.binding(r.DUID, r.IAID); bound {
		t.Error("the server binds an address to the client: Advertises must not")
	}
	if w.endsClosed() != 0 {
		t.Error("the connection stays open after Advertises")
	}
}

// The end of the context returns what came before it, without an error;
// with no server, nothing. A request that cannot be sent is refused.
func TestAdvertisesUntilContextEnds(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	c := w.client()
	r := macvlanReq(2)
	r.Hint = netip.MustParseAddr("2001:db8:60::1:5")
	advs, err := c.Advertises(ctxFor(t, 150*time.Millisecond), r)
	if err != nil || len(advs) != 1 || !bytes.Equal(advs[0].ServerID, s.duid.ToBytes()) {
		t.Fatalf("Advertises: %v, %v; want the server's", advs, err)
	}
	onlySolicits(t, 1, s)
	if ia := s.messages(dhcpv6.MessageTypeSolicit)[0].Options.OneIANA(); ia == nil || ia.Options.OneAddress() == nil || !ia.Options.OneAddress().IPv6Addr.Equal(r.Hint.AsSlice()) {
		t.Errorf("the Solicit's IA_NA %v: want the hint %s", ia, r.Hint)
	}

	w = newWire(t)
	if advs, err := w.client().Advertises(ctxFor(t, 150*time.Millisecond), r); err != nil || len(advs) != 0 {
		t.Fatalf("Advertises with no server: %v, %v; want none and no error", advs, err)
	}
	bad := r
	bad.Parent = "nosuch0"
	if _, err := w.client().Advertises(ctxFor(t, 150*time.Millisecond), bad); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("Advertises on a parent that cannot be opened: %v, want its error naming it", err)
	}
	bad = r
	bad.DUID = nil
	if _, err := w.client().Advertises(ctxFor(t, 150*time.Millisecond), bad); err == nil || !strings.Contains(err.Error(), "DUID") {
		t.Fatalf("Advertises without a DUID: %v, want the request refused", err)
	}
}
