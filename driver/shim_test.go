package driver

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

func withHost(id, parent, addr string, opts ...string) netReq {
	o := map[string]string{"parent": parent, config.OptHostAddress: addr}
	for i := 0; i+1 < len(opts); i += 2 {
		o[opts[i]] = opts[i+1]
	}
	return netReq{ID: id, Opts: o, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, Aux: []string{addr}}
}

func TestHostAddressRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    netReq
		want []string
	}{
		{"not IPv4", withHost(netA, "eth0", "2001:db8::5"), []string{"not an IPv4 address"}},
		{"not an address", withHost(netA, "eth0", "host"), []string{`"host"`}},
		{"outside the subnets", withHost(netA, "eth0", "198.18.9.5"), []string{"198.18.9.5", "none of the network's IPv4 subnets"}},
		{"an IPv6-only network", func() netReq {
			r := withHost(netA, "eth0", "198.18.1.5")
			r.V4, r.Aux, r.V6 = nil, nil, []string{"2001:db8:1::/64,2001:db8:1::1/64"}
			return r
		}(), []string{"IPv6 only", "--ipv4=false", "host_address6 is not supported"}},
		{"the gateway", withHost(netA, "eth0", "198.18.1.1"), []string{"gateway", "--aux-address host=ADDR"}},
		{"not reserved", func() netReq { r := withHost(netA, "eth0", "198.18.1.5"); r.Aux = nil; return r }(), []string{"--aux-address host=198.18.1.5"}},
		{"macvlan private", withHost(netA, "eth0", "198.18.1.5", "macvlan_mode", "private"), []string{"macvlan_mode=bridge", "private"}},
		{"macvlan passthru", withHost(netA, "eth0", "198.18.1.5", "macvlan_mode", "passthru"), []string{"macvlan_mode=bridge"}},
		{"ipvlan private flag", withHost(netA, "eth0", "198.18.1.5", "ipvlan_mode", "l3", "ipvlan_flag", "private"), []string{"ipvlan_flag=bridge"}},
		{"internal", func() netReq { r := withHost(netA, "", "198.18.1.5"); delete(r.Opts, "parent"); return r }(), []string{"needs a parent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			wantErr(t, f.create(tc.r), pluginapi.ErrInvalid, tc.want...)
			f.wantNetworks()
			f.wantLinks()
		})
	}
	f := newFixture(t)
	for _, mode := range []string{"l2", "l3", "l3s"} {
		f.mustCreate(withHost(netA, "eth0", "198.18.1.5", "ipvlan_mode", mode))
		f.del(netA)
	}
}

func (f *fixture) del(id string) {
	f.t.Helper()
	if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: id}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) wantRoutes(want map[string]string) {
	f.t.Helper()
	got := map[string]string{}
	for d, l := range f.k.Routes() {
		got[d.String()] = l
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		f.t.Fatalf("host routes %v, want %v", got, want)
	}
}

func TestHostLinkLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	shim := config.ShimName(netA)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	l, ok := f.k.Link(shim)
	if !ok || l.Kind != "macvlan" || l.Mode != "bridge" || f.k.Parent(shim) != "eth0" || l.Alias != f.d.mark {
		t.Fatalf("host link %+v on %s", l, f.k.Parent(shim))
	}
	if a := f.k.Addrs(shim); fmt.Sprint(a) != "[198.18.1.5]" {
		t.Fatalf("host link addresses %v", a)
	}
	ep := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.wantRoutes(map[string]string{"198.18.1.10": shim})
	// Reuse re-makes a missing host link with its routes.
	f.k.Remove(shim)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	f.wantRoutes(map[string]string{"198.18.1.10": shim})
	// kill -9 with the link deleted while down: re-made at start.
	f.k.Remove(shim)
	f.restart()
	f.wantRoutes(map[string]string{"198.18.1.10": shim})
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	f.wantRoutes(map[string]string{})
	f.wantLinks(shim) // Leave deleted the endpoint's link, back in the host namespace
	_ = ep
	// Another host address is another configuration: replaced.
	f.mustCreate(withHost(netA, "eth0", "198.18.1.6"))
	if a := f.k.Addrs(shim); fmt.Sprint(a) != "[198.18.1.6]" {
		t.Fatalf("replaced host link addresses %v", a)
	}
	f.del(netA)
	f.wantLinks()
	f.wantRoutes(map[string]string{})
}

func TestStrayHostLinkRemovedAtStart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stray := kernel.Endpoint{Name: config.ShimName(netB), Parent: "eth0", Type: "macvlan", Mode: "bridge", Mark: f.d.mark}
	if err := f.k.AddShim(ctx, stray, netip.MustParseAddr("198.18.1.9")); err != nil {
		t.Fatal(err)
	}
	foreign := stray
	foreign.Name, foreign.Mark = config.ShimName(netC), kernel.Mark("other")
	if err := f.k.AddShim(ctx, foreign, netip.MustParseAddr("198.18.1.8")); err != nil {
		t.Fatal(err)
	}
	f.restart()
	f.wantLinks(config.ShimName(netC))
}

// waitFor polls cond for up to 3 seconds, the repair deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 3 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatcherRepairsOwnedLinks(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10", config.OptHostAddress: "198.18.1.5"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, Aux: []string{"198.18.1.5"}})
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.d.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	shim := config.ShimName(netA)
	has := func(name string) func() bool { return func() bool { _, ok := f.k.Link(name); return ok } }
	// The host link alone goes.
	f.k.Remove(shim)
	waitFor(t, "the host link re-made", func() bool { return has(shim)() && f.k.Routes()[netip.MustParseAddr("198.18.1.10")] == shim })
	// The VLAN goes, taking the host link with it.
	f.k.Remove("eth0.10")
	waitFor(t, "the VLAN and the host link re-made", func() bool { return has("eth0.10")() && has(shim)() })
	// The base goes: nothing can be made until it comes back.
	f.k.Remove("eth0")
	time.Sleep(300 * time.Millisecond)
	if has("eth0.10")() {
		t.Fatal("a VLAN was made without its base")
	}
	f.k.AddHostLink("eth0", "device", 1500)
	waitFor(t, "the VLAN re-made once its base is back", func() bool { return has("eth0.10")() && has(shim)() })
	// A link underlay does not own is never fought over.
	f.k.AddHostLink("user0", "device", 1500)
	f.k.Remove("user0")
	time.Sleep(200 * time.Millisecond)
	if has("user0")() {
		t.Fatal("a user's link was re-made")
	}
	// Nothing is re-made for a network that is gone.
	f.del(netA)
	time.Sleep(300 * time.Millisecond)
	f.wantLinks() // the endpoint's link went with its base
	var nets []record.Network
	_ = f.db.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error { nets = append(nets, n); return nil })
	})
	if len(nets) != 0 {
		t.Fatalf("networks %v", nets)
	}
}

// A Join that finds the host link gone makes it again with the routes of
// every joined endpoint, not only its own.
func TestJoinRemakesTheHostLinkWithEveryRoute(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	shim := config.ShimName(netA)
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.k.Remove(shim)
	f.mustEndpoint(netA, epB, "198.18.1.11/24")
	f.wantRoutes(map[string]string{"198.18.1.10": shim, "198.18.1.11": shim})
}

// A Join whose address the host already routes through another link (an
// operator's route, another instance's host link) is refused with a
// conflict naming the holder, and undone: the endpoint's link goes and its
// record is not joined, so no repair routes it later; the foreign route
// stays through the refusal, a Join through the unhealthy path (host
// link gone), DeleteEndpoint and a restart. A second endpoint is routed.
func TestJoinRefusedForAHeldHostRoute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	shim := config.ShimName(netA)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	f.k.HoldRoute(netip.MustParseAddr("198.18.1.10"), "eth1")
	held := map[string]string{"198.18.1.10": "eth1"}
	for _, broken := range []bool{false, true} {
		if broken {
			f.k.Remove(shim) // Join makes the host link again first
		}
		if _, err := f.endpoint(netA, epA, "198.18.1.10/24", ""); err != nil {
			t.Fatal(err)
		}
		_, err := f.join(netA, epA)
		wantErr(t, err, pluginapi.ErrConflict, "198.18.1.10", "link eth1", "which carries no underlay mark (an operator's route)", "ip route del 198.18.1.10/32 dev eth1", shim, "--ip")
		f.wantRoutes(held)
		f.wantLinks(shim) // the endpoint's link went
		if rec := f.epRecord(netA, epA); rec.Sandbox != "" {
			t.Fatalf("the refused Join left the record joined to %q", rec.Sandbox)
		}
		if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
			t.Fatal(err)
		}
		f.wantRoutes(held)
	}
	f.mustEndpoint(netA, epB, "198.18.1.11/24")
	f.restart()
	f.wantRoutes(map[string]string{"198.18.1.10": "eth1", "198.18.1.11": shim})
}
