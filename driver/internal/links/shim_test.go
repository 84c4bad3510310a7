package links

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

var (
	hostAddr = netip.MustParseAddr("192.0.2.254")
	shim     = config.ShimName(drivertest.NetA)
	epAddrs  = []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")}
)

func network() record.Network {
	n := drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "192.0.2.0/24")
	n.HostAddress = hostAddr.String()
	return n
}

// deleted is what DeleteOwned was asked: name and whether recorded.
type deleted struct {
	name     string
	recorded bool
}

type fixture struct {
	k       *nltest.Kernel
	h       *Shims
	deletes []deleted
	delErr  error
}

// newFixture: a kernel with eth0 (MTU 1500) and the Shims over it, whose
// DeleteOwned deletes from the kernel and remembers what it was asked.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{k: nltest.New()}
	f.k.AddHostLink("eth0", "device", 1500)
	f.h = &Shims{Links: f.k, Mark: mark, Log: slog.New(slog.DiscardHandler),
		DeleteOwned: func(ctx context.Context, name string, recorded bool) error {
			f.deletes = append(f.deletes, deleted{name, recorded})
			if f.delErr != nil {
				return f.delErr
			}
			return f.k.Delete(ctx, name)
		}}
	return f
}

// healthy fails t unless the host link is up on eth0 with the mark, the
// host address and mtu, and the routes go through it.
func (f *fixture) healthy(t *testing.T, mtu int, routes ...netip.Addr) {
	t.Helper()
	l, ok := f.k.Link(shim)
	if !ok {
		t.Fatalf("no host link %s; links %v", shim, f.k.Names())
	}
	if l.Kind != kernel.KindMacvlan || l.Mode != "bridge" || l.Alias != mark || l.Down || l.MTU != mtu || f.k.Parent(shim) != "eth0" {
		t.Fatalf("host link %+v on %q, want an up macvlan bridge on eth0 with mark %q and MTU %d", l, f.k.Parent(shim), mark, mtu)
	}
	if got := f.k.Addrs(shim); !slices.Equal(got, []netip.Addr{hostAddr}) {
		t.Fatalf("host link addresses %v, want [%s]", got, hostAddr)
	}
	want := map[netip.Addr]string{}
	for _, r := range routes {
		want[r] = shim
	}
	if got := f.k.Routes(); !mapsEqual(got, want) {
		t.Fatalf("host routes %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[netip.Addr]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestEnsureNoHostAddress(t *testing.T) {
	f := newFixture(t)
	n := network()
	n.HostAddress = ""
	before := f.k.Names()
	if err := f.h.Ensure(context.Background(), n, epAddrs); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.k.Names(), before) || len(f.k.Routes()) != 0 || f.k.Calls("get") != 0 {
		t.Fatalf("a network without a host address touched the kernel: links %v, routes %v", f.k.Names(), f.k.Routes())
	}
}

func TestEnsureCorruptHostAddress(t *testing.T) {
	f := newFixture(t)
	n := network()
	n.HostAddress = "192.0.2.300"
	drivertest.WantErr(t, f.h.Ensure(context.Background(), n, nil), store.ErrCorrupt, "192.0.2.300")
	if _, ok := f.k.Link(shim); ok {
		t.Fatal("a host link was made from a corrupt record")
	}
}

func TestEnsureMakes(t *testing.T) {
	f := newFixture(t)
	if err := f.h.Ensure(context.Background(), network(), epAddrs); err != nil {
		t.Fatal(err)
	}
	f.healthy(t, 1500, epAddrs...)
	if len(f.deletes) != 0 {
		t.Fatalf("deleted %v making a host link on a clean kernel", f.deletes)
	}
	if !f.h.Healthy(context.Background(), network()) {
		t.Fatal("Healthy = false for the link Ensure made")
	}

	// Again: nothing to heal, nothing made, the routes stay.
	if err := f.h.Ensure(context.Background(), network(), epAddrs); err != nil {
		t.Fatal(err)
	}
	if n := f.k.Calls("heal") + f.k.Calls("endpoint"); n != 1 {
		t.Fatalf("Ensure of a healthy host link healed or made links (%d heal+endpoint calls, want the one make)", n)
	}
	f.healthy(t, 1500, epAddrs...)
}

func TestEnsureMTU(t *testing.T) {
	f := newFixture(t)
	n := network()
	n.MTU = 1400
	if err := f.h.Ensure(context.Background(), n, nil); err != nil {
		t.Fatal(err)
	}
	f.healthy(t, 1400)
}

// TestEnsureHeals: an own host link that is down, lost its address or
// its MTU is put back in order, in place (no new link).
func TestEnsureHeals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(k *nltest.Kernel)
	}{
		{"down", func(k *nltest.Kernel) { k.SetDown(shim, true) }},
		{"address flushed", func(k *nltest.Kernel) { k.FlushAddrs(shim) }},
		{"MTU changed", func(k *nltest.Kernel) { k.SetMTU(shim, 1280) }},
		{"all of it", func(k *nltest.Kernel) { k.SetDown(shim, true); k.FlushAddrs(shim); k.SetMTU(shim, 1280) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			n := network()
			n.MTU = 1400
			if err := f.h.Ensure(context.Background(), n, nil); err != nil {
				t.Fatal(err)
			}
			before, _ := f.k.Link(shim)
			tc.breakIt(f.k)
			if f.h.Healthy(context.Background(), n) {
				t.Fatal("Healthy = true for a broken host link")
			}
			if err := f.h.Ensure(context.Background(), n, epAddrs[:1]); err != nil {
				t.Fatal(err)
			}
			f.healthy(t, 1400, epAddrs[0])
			if after, _ := f.k.Link(shim); after.Index != before.Index {
				t.Fatalf("the host link was made again (index %d, was %d); want it healed in place", after.Index, before.Index)
			}
			if f.k.Calls("heal") != 1 {
				t.Fatalf("%d heal calls, want 1", f.k.Calls("heal"))
			}
		})
	}
}

// TestEnsureRefuses: a link of the host link's name that is another
// instance's, or the name an altname of another link, is a conflict and
// nothing changes.
func TestEnsureRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(k *nltest.Kernel)
		want []string
	}{
		{"another instance's mark", func(k *nltest.Kernel) {
			k.AddLink(kernel.Link{Name: shim, Kind: kernel.KindMacvlan, MTU: 1500, Alias: other})
		}, []string{shim, other, "ip link del " + shim}},
		{"an altname of another link", func(k *nltest.Kernel) {
			k.AddHostLink("eth1", "device", 1500)
			k.AddAltName("eth1", shim)
		}, []string{shim, "altname of link eth1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.add(f.k)
			before := f.k.Names()
			drivertest.WantErr(t, f.h.Ensure(context.Background(), network(), epAddrs), pluginapi.ErrConflict, tc.want...)
			if !slices.Equal(f.k.Names(), before) || len(f.k.Routes()) != 0 || len(f.deletes) != 0 {
				t.Fatalf("a refused Ensure changed the kernel: links %v (were %v), routes %v, deletes %v", f.k.Names(), before, f.k.Routes(), f.deletes)
			}
			if f.h.Healthy(context.Background(), network()) {
				t.Fatal("Healthy = true for a link that is not this instance's")
			}
		})
	}
}

// TestEnsureReplacesUnmarked: a link of the name without a mark (a crash
// while it was made) is deleted, as a recorded link, and made again.
func TestEnsureReplacesUnmarked(t *testing.T) {
	f := newFixture(t)
	eth0, _ := f.k.Link("eth0")
	f.k.AddLink(kernel.Link{Name: shim, Kind: kernel.KindMacvlan, ParentIndex: eth0.Index, MTU: 1500})
	if err := f.h.Ensure(context.Background(), network(), epAddrs); err != nil {
		t.Fatal(err)
	}
	if want := []deleted{{shim, true}}; !slices.Equal(f.deletes, want) {
		t.Fatalf("DeleteOwned asked %v, want %v", f.deletes, want)
	}
	f.healthy(t, 1500, epAddrs...)
}

// TestEnsureDeletesRenamed: this instance's endpoint-kind link an
// operator renamed from the host link (it carries the host address) is
// deleted before the host link is made again; other links are kept.
func TestEnsureDeletesRenamed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	spec := f.h.spec(network())
	if err := f.k.AddShim(ctx, spec, hostAddr); err != nil {
		t.Fatal(err)
	}
	if err := f.k.Rename(shim, "renamed0"); err != nil {
		t.Fatal(err)
	}
	// Kept: another instance's copy, a link of ours without the address,
	// an endpoint's link and another network's host link with it.
	keep := func(name, alias string, addr bool) {
		s := spec
		s.Name, s.Mark, s.MAC = name, alias, ""
		if addr {
			if err := f.k.AddShim(ctx, s, hostAddr); err != nil {
				t.Fatal(err)
			}
		} else if err := f.k.AddEndpoint(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	keep("theirs0", other, true)
	keep("plain0", mark, false)
	keep(config.EndpointLinkName(drivertest.EpA), mark, true)
	keep(config.ShimName(drivertest.NetB), mark, true)

	if err := f.h.Ensure(ctx, network(), nil); err != nil {
		t.Fatal(err)
	}
	if want := []deleted{{"renamed0", false}}; !slices.Equal(f.deletes, want) {
		t.Fatalf("DeleteOwned asked %v, want %v", f.deletes, want)
	}
	for _, name := range []string{"theirs0", "plain0", config.EndpointLinkName(drivertest.EpA), config.ShimName(drivertest.NetB)} {
		if _, ok := f.k.Link(name); !ok {
			t.Errorf("%s was deleted", name)
		}
	}
	f.healthy(t, 1500)
}

func TestEnsureErrors(t *testing.T) {
	boom := errors.New("netlink: device busy")
	t.Run("make", func(t *testing.T) {
		f := newFixture(t)
		f.k.SetFault(func(op, _ string) error {
			if op == "endpoint" {
				return boom
			}
			return nil
		})
		err := f.h.Ensure(context.Background(), network(), epAddrs)
		if !errors.Is(err, boom) {
			t.Fatalf("Ensure = %v, want the kernel's error", err)
		}
		drivertest.WantErr(t, err, nil, shim, "eth0")
		if len(f.k.Routes()) != 0 {
			t.Fatalf("routes %v added without a host link", f.k.Routes())
		}
	})
	t.Run("lookup", func(t *testing.T) {
		f := newFixture(t)
		f.k.SetFault(func(op, _ string) error {
			if op == "get" {
				return boom
			}
			return nil
		})
		if err := f.h.Ensure(context.Background(), network(), epAddrs); !errors.Is(err, boom) {
			t.Fatalf("Ensure = %v, want the lookup's error", err)
		}
		if _, ok := f.k.Link(shim); ok {
			t.Fatal("a host link was made though its name could not be looked up")
		}
	})
	t.Run("delete", func(t *testing.T) {
		f := newFixture(t)
		f.delErr = boom
		f.k.AddLink(kernel.Link{Name: shim, Kind: kernel.KindMacvlan, MTU: 1500})
		if err := f.h.Ensure(context.Background(), network(), epAddrs); !errors.Is(err, boom) {
			t.Fatalf("Ensure = %v, want DeleteOwned's error", err)
		}
		if f.k.Calls("endpoint") != 0 {
			t.Fatal("a host link was made though the one in its way could not be deleted")
		}
	})
	t.Run("heal", func(t *testing.T) {
		f := newFixture(t)
		if err := f.h.Ensure(context.Background(), network(), nil); err != nil {
			t.Fatal(err)
		}
		f.k.SetDown(shim, true)
		f.k.SetFault(func(op, _ string) error {
			if op == "heal" {
				return boom
			}
			return nil
		})
		err := f.h.Ensure(context.Background(), network(), epAddrs)
		if !errors.Is(err, boom) {
			t.Fatalf("Ensure = %v, want the heal's error", err)
		}
		drivertest.WantErr(t, err, nil, shim, "it is down")
	})
	t.Run("route", func(t *testing.T) {
		f := newFixture(t)
		f.k.SetFault(func(op, _ string) error {
			if op == "route" {
				return boom
			}
			return nil
		})
		if err := f.h.Ensure(context.Background(), network(), epAddrs); !errors.Is(err, boom) {
			t.Fatalf("Ensure = %v, want the route's error", err)
		}
	})
}

func TestRoute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	n := network()
	if err := f.h.Ensure(ctx, n, nil); err != nil {
		t.Fatal(err)
	}
	ep := record.Endpoint{NetworkID: n.ID, ID: drivertest.EpA, IPv4: "192.0.2.10/24", IPv6: "2001:db8::10/64"}
	if err := f.h.Route(ctx, &n, ep, false); err != nil {
		t.Fatal(err)
	}
	if got := f.k.Routes(); !mapsEqual(got, map[netip.Addr]string{epAddrs[0]: shim}) {
		t.Fatalf("routes %v after Route, want %s via %s", got, epAddrs[0], shim)
	}
	if err := f.h.Route(ctx, &n, ep, true); err != nil {
		t.Fatal(err)
	}
	if got := f.k.Routes(); len(got) != 0 {
		t.Fatalf("routes %v after Route(del)", got)
	}

	// Nothing to route: no network, no host address, no IPv4 address.
	plain := network()
	plain.HostAddress = ""
	v6 := ep
	v6.IPv4 = ""
	calls := f.k.Calls("route") + f.k.Calls("route-delete")
	for _, c := range []struct {
		n  *record.Network
		ep record.Endpoint
	}{{nil, ep}, {&plain, ep}, {&n, v6}} {
		for _, del := range []bool{false, true} {
			if err := f.h.Route(ctx, c.n, c.ep, del); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := f.k.Calls("route") + f.k.Calls("route-delete"); got != calls {
		t.Fatalf("%d route calls for endpoints with nothing to route", got-calls)
	}
}

func TestHealthy(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if f.h.Healthy(ctx, network()) {
		t.Fatal("Healthy = true with no host link")
	}
	if err := f.h.Ensure(ctx, network(), nil); err != nil {
		t.Fatal(err)
	}
	if !f.h.Healthy(ctx, network()) {
		t.Fatal("Healthy = false for a healthy host link")
	}
	n := network()
	n.MTU = 1400
	if f.h.Healthy(ctx, n) {
		t.Fatal("Healthy = true for a host link of another MTU than the network's")
	}
	n = network()
	n.HostAddress = "192.0.2.253"
	if f.h.Healthy(ctx, n) {
		t.Fatal("Healthy = true for a host link without the network's address")
	}
	n.HostAddress = "not an address"
	if f.h.Healthy(ctx, n) {
		t.Fatal("Healthy = true for a network with a corrupt host address")
	}
}

// TestHealthyNotOurs: a host link up with the address and MTU is not
// healthy when it is another instance's, or when its name is an altname
// of another link.
func TestHealthyNotOurs(t *testing.T) {
	ctx := context.Background()
	t.Run("another instance's", func(t *testing.T) {
		f := newFixture(t)
		s := f.h.spec(network())
		s.Mark = other
		if err := f.k.AddShim(ctx, s, hostAddr); err != nil {
			t.Fatal(err)
		}
		if f.h.Healthy(ctx, network()) {
			t.Fatal("Healthy = true for another instance's host link")
		}
	})
	t.Run("altname", func(t *testing.T) {
		f := newFixture(t)
		s := f.h.spec(network())
		s.Name = "copy0"
		if err := f.k.AddShim(ctx, s, hostAddr); err != nil {
			t.Fatal(err)
		}
		f.k.AddAltName("copy0", shim)
		if f.h.Healthy(ctx, network()) {
			t.Fatal("Healthy = true for a link whose altname is the host link's name")
		}
	})
}

// held: the ways a route to an endpoint's address can be someone else's,
// each with what the refusal and the warning must name.
var held = []struct {
	name   string
	holder func(t *testing.T, f *fixture) // adds the holder's link, if any
	link   string                         // "" for a route through no link
	want   []string
}{
	{"an operator's route", func(t *testing.T, f *fixture) { f.k.AddHostLink("eth1", "device", 1500) },
		"eth1", []string{"link eth1", "which carries no underlay mark (an operator's route)", "ip route del 192.0.2.10/32 dev eth1"}},
	{"another instance's host link", func(t *testing.T, f *fixture) {
		s := f.h.spec(drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "192.0.2.0/24"))
		s.Mark = other
		if err := f.k.AddShim(context.Background(), s, netip.MustParseAddr("192.0.2.253")); err != nil {
			t.Fatal(err)
		}
	}, config.ShimName(drivertest.NetB), []string{"link " + config.ShimName(drivertest.NetB), other, "of another underlay instance",
		"disconnect the other instance's container with address 192.0.2.10"}},
	{"this instance's other host link", func(t *testing.T, f *fixture) {
		s := f.h.spec(drivertest.Macvlan(drivertest.NetC, "eth0", "bridge", "192.0.2.0/24"))
		if err := f.k.AddShim(context.Background(), s, netip.MustParseAddr("192.0.2.252")); err != nil {
			t.Fatal(err)
		}
	}, config.ShimName(drivertest.NetC), []string{"link " + config.ShimName(drivertest.NetC) + ", which carries this instance's mark but is not this network's host link",
		"ip route del 192.0.2.10/32 dev " + config.ShimName(drivertest.NetC)}},
	{"a blackhole route", func(*testing.T, *fixture) {}, "", []string{"no link (a blackhole route)", "ip route del blackhole 192.0.2.10/32"}},
}

// TestRouteRefusesAHeldRoute: a route to the endpoint's address through
// another link (or none) is a conflict naming the holder and the fix,
// and stays as it was.
func TestRouteRefusesAHeldRoute(t *testing.T) {
	for _, tc := range held {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			n := network()
			if err := f.h.Ensure(ctx, n, nil); err != nil {
				t.Fatal(err)
			}
			tc.holder(t, f)
			f.k.HoldRoute(epAddrs[0], tc.link)
			ep := record.Endpoint{NetworkID: n.ID, ID: drivertest.EpA, IPv4: epAddrs[0].String() + "/24"}
			err := f.h.Route(ctx, &n, ep, false)
			want := append([]string{"192.0.2.10", shim, "another address (--ip)"}, tc.want...)
			drivertest.WantErr(t, err, pluginapi.ErrConflict, want...)
			if !errors.Is(err, netlinkutil.ErrRouteHeld) {
				t.Fatalf("Route = %v, want it to wrap netlinkutil.ErrRouteHeld", err)
			}
			if got := f.k.Routes(); !mapsEqual(got, map[netip.Addr]string{epAddrs[0]: tc.link}) {
				t.Fatalf("routes %v after the refusal, want %s still through %q", got, epAddrs[0], tc.link)
			}
			// Removing the endpoint's route leaves the holder's.
			if err := f.h.Route(ctx, &n, ep, true); err != nil {
				t.Fatal(err)
			}
			if got := f.k.Routes(); !mapsEqual(got, map[netip.Addr]string{epAddrs[0]: tc.link}) {
				t.Fatalf("routes %v after Route(del), want %s still through %q", got, epAddrs[0], tc.link)
			}
		})
	}
}

// TestRouteKeepsItsOwn: a route already through the host link is fine.
func TestRouteKeepsItsOwn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	n := network()
	if err := f.h.Ensure(ctx, n, epAddrs[:1]); err != nil {
		t.Fatal(err)
	}
	ep := record.Endpoint{NetworkID: n.ID, ID: drivertest.EpA, IPv4: epAddrs[0].String() + "/24"}
	if err := f.h.Route(ctx, &n, ep, false); err != nil {
		t.Fatal(err)
	}
	f.healthy(t, 1500, epAddrs[0])
}

// TestEnsureLeavesHeldRoutes: the repair puts back the routes it can,
// leaves a route another link holds as it is, and warns once per holder,
// naming it; again once the route was underlay's again and taken anew.
func TestEnsureLeavesHeldRoutes(t *testing.T) {
	for _, tc := range held {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var log bytes.Buffer
			f.h.Log = slog.New(slog.NewTextHandler(&log, nil))
			ctx := context.Background()
			tc.holder(t, f)
			f.k.HoldRoute(epAddrs[0], tc.link)
			warnings := func() int {
				return strings.Count(log.String(), "level=WARN msg=\"the host's route to a joined endpoint is held by another link")
			}
			for range 3 {
				if err := f.h.Ensure(ctx, network(), epAddrs); err != nil {
					t.Fatal(err)
				}
			}
			want := map[netip.Addr]string{epAddrs[0]: tc.link, epAddrs[1]: shim}
			if got := f.k.Routes(); !mapsEqual(got, want) {
				t.Fatalf("routes %v, want %v", got, want)
			}
			if n := warnings(); n != 1 {
				t.Fatalf("%d warnings over 3 repairs, want 1:\n%s", n, log.String())
			}
			for _, w := range append([]string{"address=192.0.2.10", "host_link=" + shim}, tc.want...) {
				if !strings.Contains(log.String(), w) {
					t.Fatalf("the warning does not name %q:\n%s", w, log.String())
				}
			}
			// The holder lets go: the repair routes it; taken again: warned again.
			if err := f.k.DelHostRoute(ctx, epAddrs[0], tc.link); err != nil {
				t.Fatal(err)
			}
			if err := f.h.Ensure(ctx, network(), epAddrs); err != nil {
				t.Fatal(err)
			}
			f.healthy(t, 1500, epAddrs...)
			f.k.HoldRoute(epAddrs[0], tc.link)
			if err := f.h.Ensure(ctx, network(), epAddrs); err != nil {
				t.Fatal(err)
			}
			if n := warnings(); n != 2 {
				t.Fatalf("%d warnings, want 2 (the route was taken twice):\n%s", n, log.String())
			}
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.Contains(l, "WARN") {
					t.Log(l)
					break
				}
			}
		})
	}
}
