package integration

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
)

// What of a lease a container's kernel would refuse (issue 22 §3) is not
// answered by Join, and broken T1/T2 still leave the lease renewed in time.
func TestDHCPHostileLeases(t *testing.T) {
	// Serial: the renewal must come on schedule (its subtests run in parallel among themselves).
	itest.RequireRoot(t)
	gw, other := dhcpServer.Addr(), netip.MustParseAddr("198.18.180.2")

	// Option 121 with a route to the connected subnet, a second route to
	// one destination and a route via the subnet's broadcast address:
	// Join answers only the good route, and the gateway of the default
	// route; the daemon logs each dropped one at WARN.
	t.Run("bad option 121 routes", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease, Routes: []itest.DHCPRoute{
			{Dst: netip.MustParsePrefix("198.18.180.0/24"), Gateway: gw},
			{Dst: netip.MustParsePrefix("198.18.190.0/24"), Gateway: gw},
			{Dst: netip.MustParsePrefix("198.18.190.0/24"), Gateway: other},
			{Dst: netip.MustParsePrefix("198.18.191.0/24"), Gateway: netip.MustParseAddr("198.18.180.255")},
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: gw},
		}})
		e.createNetwork(t, netA)
		e.createEndpoint(t, netA, epA)
		j := e.join(t, netA, epA)
		if j.Gateway != gw.String() || len(j.StaticRoutes) != 1 || j.StaticRoutes[0].Destination != "198.18.190.0/24" || j.StaticRoutes[0].NextHop != gw.String() {
			t.Fatalf("Join answered gateway %q routes %v: want %s and only 198.18.190.0/24 via %s", j.Gateway, j.StaticRoutes, gw, gw)
		}
		for _, want := range []string{"198.18.180.0/24 via 198.18.180.1 (option 121): the connected subnet", "198.18.190.0/24 via 198.18.180.2 (option 121): a second route",
			"198.18.191.0/24 via 198.18.180.255 (option 121): via the broadcast address"} {
			if !strings.Contains(e.d.Log(), want) {
				t.Errorf("the daemon's log does not say %q:\n%s", want, e.d.Log())
			}
		}
		e.d.RemoveEndpoint(netA, epA)
		e.d.DeleteNetwork(netA)
	})

	// A router that is the subnet's broadcast or network address, or the
	// leased address itself, is no gateway: Join answers none.
	for name, router := range map[string]netip.Addr{
		"broadcast": netip.MustParseAddr("198.18.180.255"), "network": netip.MustParseAddr("198.18.180.0"), "leased address": netip.MustParseAddr("198.18.180.100"),
	} {
		t.Run("router is the "+name, func(t *testing.T) {
			t.Parallel()
			e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease, Router: router})
			e.createNetwork(t, netA)
			addr, _, _ := e.createEndpoint(t, netA, epA)
			if addr.Addr() != netip.MustParseAddr("198.18.180.100") {
				t.Fatalf("leased %s: the test expects the pool's first address", addr)
			}
			if j := e.join(t, netA, epA); j.Gateway != "" || len(j.StaticRoutes) != 0 {
				t.Fatalf("Join answered gateway %q routes %v: want none (router %s dropped)", j.Gateway, j.StaticRoutes, router)
			}
			if !strings.Contains(e.d.Log(), "dropped router "+router.String()+" (option 3)") {
				t.Errorf("the daemon's log does not name the dropped router %s", router)
			}
			e.d.RemoveEndpoint(netA, epA)
			e.d.DeleteNetwork(netA)
		})
	}

	// T1 = T2 = 0 sent with a 10 s lease: they count as the defaults, so
	// the renewal comes at 5 s (not at once and in a loop), and the lease
	// is renewed before it ends.
	t.Run("T1 = T2 = 0", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease, Times: &[2]time.Duration{0, 0}})
		e.createNetwork(t, netA)
		addr, _, l := e.createEndpoint(t, netA, epA)
		renewed := waitRenewed(t, e.srv, addr.Addr(), l, time.Until(l.Granted.Add(dhcpT1+dhcpSlack)))
		wantRenewalAt(t, e.srv, itest.From(l.MAC, nil), addr.Addr(), l.Granted, l.Granted.Add(dhcpT1), "T1 = T2 = 0")
		if n := len(renewals(e.srv, itest.From(l.MAC, nil), addr.Addr(), l.Granted)); n != 1 || renewed.Acks != 2 {
			t.Fatalf("%d renewal REQUESTs by %s, want 1:\n%s", n, time.Now().Format("15:04:05.000"), e.srv.MessagesString())
		}
		if m := e.srv.Messages(itest.OfType(dhcpv4.MessageTypeRequest)); len(m) > 3 {
			t.Fatalf("the server saw %d REQUESTs: a renewal loop", len(m))
		}
		e.d.RemoveEndpoint(netA, epA)
		e.d.DeleteNetwork(netA)
	})
}
