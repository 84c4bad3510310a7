package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netlinkutil's AddHostRoute against the real kernel, in a namespace of the
// test's own: it adds a host route only when the main table has no route
// to exactly that address, keeps one through its link, and refuses one
// through any other link or none (whatever its metric, and also when a
// policy rule sends the lookup to another table) without touching it. Of
// two kernels (sockets) adding one address through two links at once, one
// wins.

// prefixOf is a one-address net.IPNet.
func prefixOf(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// routesTo lists the main table's routes to exactly a (one address) as
// "link metric type", "type" alone for a route through no link.
func routesTo(t *testing.T, ns *itest.Netns, a netip.Addr) []string {
	t.Helper()
	family := netlink.FAMILY_V4
	if a.Is6() {
		family = netlink.FAMILY_V6
	}
	rs, err := ns.NL.RouteListFiltered(family, &netlink.Route{Dst: prefixOf(a), Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("list the routes to %s: %v", a, err)
	}
	var out []string
	for _, r := range rs {
		if r.LinkIndex == 0 {
			out = append(out, fmt.Sprintf("type %d", r.Type))
			continue
		}
		l, err := ns.NL.LinkByIndex(r.LinkIndex)
		name := fmt.Sprint(r.LinkIndex)
		if err == nil {
			name = l.Attrs().Name
		}
		out = append(out, fmt.Sprintf("%s %d %d", name, r.Priority, r.Type))
	}
	return out
}

func wantRoutesTo(t *testing.T, ns *itest.Netns, a netip.Addr, want ...string) {
	t.Helper()
	if got := routesTo(t, ns, a); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routes to %s: %v, want %v", a, got, want)
	}
}

// wantHeld fails unless err is AddHostRoute's refusal naming holder
// (empty: a route through no link) and, for one without a link, kind.
func wantHeld(t *testing.T, err error, holder, kind string) *netlinkutil.RouteHeldError {
	t.Helper()
	var held *netlinkutil.RouteHeldError
	if !errors.As(err, &held) || !errors.Is(err, netlinkutil.ErrRouteHeld) {
		t.Fatalf("AddHostRoute = %v, want a refusal wrapping ErrRouteHeld", err)
	}
	if held.Holder.Name != holder || (holder == "" && held.Type != kind) {
		t.Fatalf("refusal %q names holder %q (type %q), want %q (type %q)", err, held.Holder.Name, held.Type, holder, kind)
	}
	return held
}

func TestHostRouteKernelRefusesAHeldRoute(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("kp0", "kp0-peer", 1500)
	ns.AddVeth("kop0", "kop0-peer", 1500) // the operator's link
	addMarkedMacvlan(t, ns, "kshima", "kp0", kernel.Mark("aaaa"))
	addMarkedMacvlan(t, ns, "kshimb", "kp0", kernel.Mark("bbbb"))
	for _, l := range []string{"kshima", "kshimb"} {
		ns.Up(l)
	}
	k := newKernel(t, ns)
	ctx := context.Background()
	a := netip.MustParseAddr("198.18.1.10")

	// Free: added; again: kept, nothing added.
	for range 2 {
		if err := k.AddHostRoute(ctx, a, "kshima"); err != nil {
			t.Fatal(err)
		}
		wantRoutesTo(t, ns, a, fmt.Sprintf("kshima 0 %d", unix.RTN_UNICAST))
	}
	// Through another instance's link: refused, naming it and its mark.
	held := wantHeld(t, k.AddHostRoute(ctx, a, "kshimb"), "kshima", "")
	if held.Holder.Alias != kernel.Mark("aaaa") {
		t.Fatalf("the refusal names alias %q, want the holder's mark", held.Holder.Alias)
	}
	wantRoutesTo(t, ns, a, fmt.Sprintf("kshima 0 %d", unix.RTN_UNICAST))

	// An operator's route with another metric (a plain exclusive add
	// would go beside it), a blackhole route, an IPv6 one: refused, kept.
	b := netip.MustParseAddr("198.18.1.11")
	if err := ns.NL.RouteAdd(&netlink.Route{LinkIndex: ns.LinkIndex("kop0"), Scope: netlink.SCOPE_LINK, Dst: prefixOf(b), Priority: 100}); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, k.AddHostRoute(ctx, b, "kshima"), "kop0", "")
	wantRoutesTo(t, ns, b, fmt.Sprintf("kop0 100 %d", unix.RTN_UNICAST))

	c := netip.MustParseAddr("198.18.1.12")
	if err := ns.NL.RouteAdd(&netlink.Route{Dst: prefixOf(c), Type: unix.RTN_BLACKHOLE}); err != nil {
		t.Fatal(err)
	}
	held = wantHeld(t, k.AddHostRoute(ctx, c, "kshima"), "", "blackhole")
	if cmd := held.DelCommand(); cmd != "ip route del blackhole 198.18.1.12/32" {
		t.Fatalf("the refusal's fix is %q", cmd)
	}
	wantRoutesTo(t, ns, c, fmt.Sprintf("type %d", unix.RTN_BLACKHOLE))

	six := netip.MustParseAddr("2001:db8:1::10")
	if err := ns.NL.RouteAdd(&netlink.Route{LinkIndex: ns.LinkIndex("kop0"), Dst: prefixOf(six), Priority: 2048}); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, k.AddHostRoute(ctx, six, "kshima"), "kop0", "")
	wantRoutesTo(t, ns, six, fmt.Sprintf("kop0 2048 %d", unix.RTN_UNICAST))
	free6 := netip.MustParseAddr("2001:db8:1::11")
	if err := k.AddHostRoute(ctx, free6, "kshima"); err != nil {
		t.Fatal(err)
	}
	if got := routesTo(t, ns, free6); len(got) != 1 || got[0][:7] != "kshima " {
		t.Fatalf("routes to %s: %v, want one through kshima", free6, got)
	}

	// A policy rule sends lookups to another table first: the main
	// table's route (of another metric: no EEXIST to tell) is still found.
	d := netip.MustParseAddr("198.18.1.13")
	if err := ns.NL.RouteAdd(&netlink.Route{LinkIndex: ns.LinkIndex("kop0"), Scope: netlink.SCOPE_LINK, Dst: prefixOf(d), Priority: 50}); err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.RouteAdd(&netlink.Route{LinkIndex: ns.LinkIndex("kp0"), Scope: netlink.SCOPE_LINK, Dst: &net.IPNet{IP: net.IPv4(198, 18, 0, 0).To4(), Mask: net.CIDRMask(16, 32)}, Table: 100}); err != nil {
		t.Fatal(err)
	}
	rule := netlink.NewRule()
	rule.Table, rule.Priority = 100, 100
	if err := ns.NL.RuleAdd(rule); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, k.AddHostRoute(ctx, d, "kshima"), "kop0", "")
	wantRoutesTo(t, ns, d, fmt.Sprintf("kop0 50 %d", unix.RTN_UNICAST))
	// ... and a free address is added to the main table.
	e := netip.MustParseAddr("198.18.1.14")
	if err := k.AddHostRoute(ctx, e, "kshima"); err != nil {
		t.Fatal(err)
	}
	wantRoutesTo(t, ns, e, fmt.Sprintf("kshima 0 %d", unix.RTN_UNICAST))

	// Deleting a route through kshima leaves the holder's.
	if err := k.DelHostRoute(ctx, b, "kshima"); err != nil {
		t.Fatal(err)
	}
	wantRoutesTo(t, ns, b, fmt.Sprintf("kop0 100 %d", unix.RTN_UNICAST))
}

// Two kernels (two sockets, as two instances have) add one address
// through two links at once, many times: each time exactly one wins, and
// the other's refusal names the winner's link.
func TestHostRouteKernelRaceOneWins(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("kp0", "kp0-peer", 1500)
	links := []string{"kshima", "kshimb"}
	for i, l := range links {
		addMarkedMacvlan(t, ns, l, "kp0", kernel.Mark(fmt.Sprint(i)))
		ns.Up(l)
	}
	ks := []*netlinkutil.Kernel{newKernel(t, ns), newKernel(t, ns)}
	ctx := context.Background()
	wins := map[string]int{}
	for round := range 50 {
		a := netip.AddrFrom4([4]byte{198, 18, 2, byte(10 + round)})
		errs := make([]error, 2)
		itest.Concurrently(2, func(i int) string { errs[i] = ks[i].AddHostRoute(ctx, a, links[i]); return "" })
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Fatalf("round %d: both adds of %s succeeded; routes %v", round, a, routesTo(t, ns, a))
		case errs[0] != nil && errs[1] != nil:
			t.Fatalf("round %d: both adds of %s failed: %v; %v", round, a, errs[0], errs[1])
		}
		w := 0
		if errs[0] != nil {
			w = 1
		}
		wins[links[w]]++
		wantHeld(t, errs[1-w], links[w], "")
		wantRoutesTo(t, ns, a, fmt.Sprintf("%s 0 %d", links[w], unix.RTN_UNICAST))
	}
	t.Logf("wins: %v", wins)
}
