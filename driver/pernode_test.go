package driver

import (
	"context"
	"errors"
	"fmt"
	"github.com/docker/go-plugins-helpers/network"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

func TestParseParent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want parentSpec
		err  []string
	}{
		{in: "", want: parentSpec{}},
		{in: "eth0", want: parentSpec{Candidates: []string{"eth0"}}},
		{in: "eth0.10", want: parentSpec{Candidates: []string{"eth0.10"}}},
		{in: "lan-a,lan-b,lan-c", want: parentSpec{Candidates: []string{"lan-a", "lan-b", "lan-c"}}},
		{in: "eth0.10,ens3.10", want: parentSpec{Candidates: []string{"eth0.10", "ens3.10"}}},
		{in: "auto", want: parentSpec{Auto: true}},
		{in: "auto.10", want: parentSpec{Auto: true, VLAN: 10}},
		{in: "auto.4094", want: parentSpec{Auto: true, VLAN: 4094}},
		{in: "auto.0", err: []string{`"auto.0"`, "1 to 4094"}},
		{in: "auto.4095", err: []string{"auto.4095", "1 to 4094"}},
		{in: "auto.x", err: []string{"auto.x", "parent=auto.10"}},
		{in: "auto.+5", err: []string{"auto.+5"}},
		{in: "eth0,,ens3", err: []string{"empty candidate", "eth0,ens3"}},
		{in: "eth0,", err: []string{"empty candidate"}},
		{in: "eth0,auto", err: []string{"auto cannot be one of several candidates"}},
		{in: "auto.10,eth0", err: []string{"auto.10 cannot be one of several"}},
		{in: "eth0,ens3,eth0", err: []string{"lists eth0 twice"}},
		{in: "eth0,lo", err: []string{"loopback"}},
		{in: "eth0,a b", err: []string{`"a b" is not a valid interface name`}},
		{in: "eth0,abcdefghijklmnopq", err: []string{"at most 15 bytes"}},
		{in: strings.Repeat("e,", 32) + "e", err: []string{"33 candidates, more than 32"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseParent(tc.in)
			if tc.err != nil {
				wantInvalid(t, err, tc.err...)
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parseParent(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func wantInvalid(t *testing.T, err error, words ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v is not ErrInvalid", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// nodeLinks is a node whose LAN link is ens3 (with a user's macvlan shim
// on it and VLAN 20 named ens3.20), a second NIC ens4 and a Docker bridge.
func nodeLinks() []netlinkutil.Link {
	return []netlinkutil.Link{
		{Name: "lo", Index: 1, Kind: "device", MTU: 65536},
		{Name: "ens3", Index: 2, Kind: "device", MTU: 1500},
		{Name: "ens4", Index: 3, Kind: "device", MTU: 1500},
		{Name: "shim0", Index: 4, Kind: "macvlan", ParentIndex: 2, MTU: 1500},
		{Name: "ens3.20", Index: 5, Kind: "vlan", ParentIndex: 2, VLAN: 20, MTU: 1500},
		{Name: "docker0", Index: 6, Kind: "bridge", MTU: 1500},
		{Name: dummyName(netB), Index: 7, Kind: "dummy", MTU: 1500},
	}
}

func rt(dst string, index, metric int, gw string) netlinkutil.Route {
	r := netlinkutil.Route{Dst: netip.MustParsePrefix(dst), LinkIndex: index, Table: netlinkutil.MainTable, Priority: metric}
	if gw != "" {
		r.Gateway = netip.MustParseAddr(gw)
	}
	return r
}

func TestPerNodeResolution(t *testing.T) {
	withSubnet := func(parent, subnet string) store.Network {
		n := asking(parent)
		n.IPv4 = []store.Pool{{Subnet: subnet}}
		return n
	}
	lanRoutes := []netlinkutil.Route{
		rt("198.18.40.0/24", 2, 0, ""),                                           // ens3's LAN
		rt("198.18.60.0/24", 3, 0, ""),                                           // ens4's LAN
		rt("0.0.0.0/0", 2, 100, "198.18.40.1"),                                   // default via ens3
		rt("198.18.40.77/32", 4, 0, ""),                                          // a user's shim route to a container
		{Dst: netip.MustParsePrefix("198.18.40.5/32"), LinkIndex: 2, Table: 255}, // local table: ignored
	}
	for _, tc := range []struct {
		name   string
		n      store.Network
		links  []netlinkutil.Link
		routes []netlinkutil.Route
		want   string
		create *store.ParentLink
		why    string
		err    []string
	}{
		{name: "first candidate that exists", n: asking("eth0,ens3,ens4"), want: "ens3", why: "candidate 2 of 3"},
		{name: "order of the list wins", n: asking("ens4,ens3"), want: "ens4", why: "candidate 1 of 2"},
		{name: "VLAN candidate counts when its base exists", n: asking("eth0.10,ens3.10"), want: "ens3.10", why: "candidate 2 of 2",
			create: &store.ParentLink{Name: "ens3.10", Kind: kindVLAN, Base: "ens3", VLAN: 10}},
		{name: "VLAN candidate finds the existing VLAN", n: asking("eth0.20,ens3.20"), want: "ens3.20"},
		{name: "no candidate exists", n: asking("eth0,enp0s31f6"),
			err: []string{"none of the parent candidates eth0, enp0s31f6 exists on this host", "(its interfaces: ens3, ens3.20, ens4, shim0)", "-o parent=eth0,enp0s31f6,IFACE"}},
		{name: "the chosen candidate is still checked", n: asking("eth0,shim0,ens3"), err: []string{"shim0 is a macvlan link on ens3"}},
		{name: "auto: connected route of the subnet", n: withSubnet("auto", "198.18.60.0/24"), routes: lanRoutes, want: "ens4",
			why: "connected route 198.18.60.0/24 holds the subnet 198.18.60.0/24"},
		{name: "auto: a route on a macvlan shim counts for its lower link", n: withSubnet("auto", "198.18.40.77/32"), routes: lanRoutes, want: "ens3"},
		{name: "auto: a wider route holds the subnet", n: withSubnet("auto", "198.18.40.128/25"), routes: lanRoutes, want: "ens3"},
		{name: "auto: the most specific route wins", n: withSubnet("auto", "198.18.60.0/26"),
			routes: []netlinkutil.Route{rt("198.18.0.0/16", 2, 0, ""), rt("198.18.60.0/24", 3, 0, "")}, want: "ens4"},
		{name: "auto: no connected route, default route", n: withSubnet("auto", "198.18.90.0/24"), routes: lanRoutes, want: "ens3",
			why: "default route uses it (no connected route holds the subnet 198.18.90.0/24)"},
		{name: "auto: no IPv4 subnet, default route", n: asking("auto"), routes: lanRoutes, want: "ens3"},
		{name: "auto: lowest metric default route", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []netlinkutil.Route{rt("0.0.0.0/0", 2, 600, "198.18.40.1"), rt("0.0.0.0/0", 3, 100, "198.18.60.1")}, want: "ens4"},
		{name: "auto: IPv6 and other tables' defaults do not count", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []netlinkutil.Route{rt("::/0", 3, 0, "2001:db8::1"), {Dst: netip.MustParsePrefix("0.0.0.0/0"), LinkIndex: 3, Table: 100}, rt("0.0.0.0/0", 2, 0, "198.18.40.1")}, want: "ens3"},
		{name: "auto: subnet on two links is refused naming them", n: withSubnet("auto", "198.18.40.0/24"),
			routes: []netlinkutil.Route{rt("198.18.40.0/24", 2, 0, ""), rt("198.18.40.0/24", 3, 100, "")},
			err:    []string{"parent=auto", "198.18.40.0/24 is on several links", "ens3, ens4"}},
		{name: "auto: the same LAN through the NIC and its shim is one link", n: withSubnet("auto", "198.18.40.0/24"),
			routes: []netlinkutil.Route{rt("198.18.40.0/24", 2, 0, ""), rt("198.18.40.0/24", 4, 0, "")}, want: "ens3"},
		{name: "auto: two default routes with one metric are refused", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []netlinkutil.Route{rt("0.0.0.0/0", 2, 0, "198.18.40.1"), rt("0.0.0.0/0", 3, 0, "198.18.60.1")},
			err:    []string{"default routes on several links (ens3, ens4)", "198.18.90.0/24"}},
		{name: "auto: nothing to go by", n: withSubnet("auto", "198.18.90.0/24"), routes: nil,
			err: []string{"no route of this host holds the subnet 198.18.90.0/24", "no IPv4 default route", "-o parent=IFACE"}},
		{name: "auto.VID: VLAN on the link auto picks", n: withSubnet("auto.30", "198.18.60.0/24"), routes: lanRoutes, want: "ens4.30",
			create: &store.ParentLink{Name: "ens4.30", Kind: kindVLAN, Base: "ens4", VLAN: 30}, why: "VLAN 30 on it"},
		{name: "auto.VID: the picked link is that VLAN", n: withSubnet("auto.20", "198.18.20.0/24"),
			routes: []netlinkutil.Route{rt("198.18.20.0/24", 5, 0, "")}, want: "ens3.20"},
		{name: "auto.VID: the picked link is another VLAN: the VLAN goes on its base", n: withSubnet("auto.30", "198.18.20.0/24"),
			routes: []netlinkutil.Route{rt("198.18.20.0/24", 5, 0, "")}, want: "ens3.30",
			create: &store.ParentLink{Name: "ens3.30", Kind: kindVLAN, Base: "ens3", VLAN: 30}},
		{name: "auto.VID: an existing VLAN of that ID is used", n: withSubnet("auto.20", "198.18.90.0/24"), routes: lanRoutes, want: "ens3.20"},
		{name: "auto: a WireGuard default route is refused naming the choice", n: withSubnet("auto", "198.18.99.0/24"),
			links:  append(nodeLinks(), netlinkutil.Link{Name: "wg0", Index: 9, Kind: "wireguard", Encap: "none", MTU: 1420}),
			routes: []netlinkutil.Route{rt("0.0.0.0/0", 9, 0, "")},
			err:    []string{"parent=auto chose wg0", "default route uses it", "wg0 is not an Ethernet link", "type none"}},
		{name: "candidates: Docker's links are not offered", n: asking("eth9,eth8"),
			links: append(nodeLinks(), netlinkutil.Link{Name: "veth1a2b3c", Index: 10, Kind: "veth"}, netlinkutil.Link{Name: "br-0123456789ab", Index: 11, Kind: "bridge"}),
			err:   []string{"(its interfaces: ens3, ens3.20, ens4, shim0)"}},
		{name: "auto: a Docker bridge is refused as usual", n: withSubnet("auto", "198.18.99.0/24"),
			routes: []netlinkutil.Route{rt("198.18.99.0/24", 6, 0, "")}, err: []string{"docker0 is a bridge Docker manages"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := tc.links
			if links == nil {
				links = nodeLinks()
			}
			got, err := resolveParent(tc.n, links, tc.routes)
			if tc.err != nil {
				wantInvalid(t, err, tc.err...)
				return
			}
			if err != nil {
				t.Fatalf("resolveParent: %v", err)
			}
			if got.Name != tc.want || !reflect.DeepEqual(got.Create, tc.create) {
				t.Errorf("resolved to %s (create %+v), want %s (create %+v)", got.Name, got.Create, tc.want, tc.create)
			}
			if !strings.Contains(got.Why, tc.why) {
				t.Errorf("why = %q, want it to say %q", got.Why, tc.why)
			}
		})
	}
}

func TestHostLinkNamesAreCapped(t *testing.T) {
	var links []netlinkutil.Link
	for i := 0; i < 25; i++ {
		links = append(links, netlinkutil.Link{Name: fmt.Sprintf("nic%02d", i), Index: i + 1, Kind: "device"})
	}
	got := hostLinkNames(links)
	if !strings.HasPrefix(got, "nic00, nic01") || !strings.HasSuffix(got, "nic19 and 5 more") {
		t.Errorf("hostLinkNames = %q, want 20 names and \"and 5 more\"", got)
	}
}

// An internal network's endpoint reports no parent_option: it has none.
func TestEndpointInfoOfInternalNetwork(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{id: netA, internal: true})
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	f.mustEndpoint(netA, ep1, "198.18.1.10/24")
	info, err := f.d.EndpointInfo(context.Background(), &network.InfoRequest{NetworkID: netA, EndpointID: ep1})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := info.Value["parent_option"]; ok || info.Value["parent"] != dummyName(netA) {
		t.Errorf("EndpointInfo = %v: want the dummy as parent and no parent_option (got %q)", info.Value, v)
	}
}

func TestKeepParent(t *testing.T) {
	joined := store.Endpoint{ID: "e1", Sandbox: "/var/run/docker/netns/x", Boot: "boot-1"}
	oldBoot := store.Endpoint{ID: "e2", Sandbox: "/var/run/docker/netns/y", Boot: "boot-0"}
	idle := store.Endpoint{ID: "e3"}
	for _, tc := range []struct {
		name   string
		exists bool
		eps    []store.Endpoint
		want   bool
	}{
		{name: "old link gone", exists: false, eps: []store.Endpoint{joined}, want: false},
		{name: "no endpoints", exists: true, want: false},
		{name: "an endpoint not joined yet (a container starting)", exists: true, eps: []store.Endpoint{idle}, want: true},
		{name: "joined in an earlier boot", exists: true, eps: []store.Endpoint{oldBoot}, want: false},
		{name: "only endpoints of an earlier boot", exists: true, eps: []store.Endpoint{oldBoot, oldBoot}, want: false},
		{name: "a container runs on it", exists: true, eps: []store.Endpoint{idle, joined}, want: true},
	} {
		if got := keepParent(tc.exists, tc.eps, "boot-1"); got != tc.want {
			t.Errorf("%s: keepParent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecideMove(t *testing.T) {
	old := asking("lan-a,lan-b")
	old.Parent = "lan-a"
	want := old
	want.Parent = "lan-b"
	holder := mv(netB, "lan-b", "bridge", "198.18.1.0/24")
	if got := decide(old, &old, nil); got.Verdict != reuse {
		t.Errorf("same link: %v, want reuse", got.Verdict)
	}
	got := decide(want, &old, []store.Network{holder})
	if got.Verdict != move || len(got.Conflicts) != 1 || got.Conflicts[0].Holder.ID != netB {
		t.Errorf("other link: %v with %d conflicts, want move with the overlapping holder on the new link", got.Verdict, len(got.Conflicts))
	}
}

const netD4 = "dddddddddddd0000000000000000000000000000000000000000000000000004"

// routeList is a fixed RouteLister.
type routeList []netlinkutil.Route

func (r routeList) Routes(context.Context) ([]netlinkutil.Route, error) { return r, nil }

// A network that comes back (same ID, same options) follows its per-node
// parent option to the link it resolves to now, unless a container still
// runs on its old link, which still exists.
func TestPerNodeParentFollowsTheHost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	f.mustCreate(netReq{id: netA, opts: map[string]string{OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" || n.Options[OptParent] != "lana,eth0" {
		t.Fatalf("record: link %s, option %q; want eth0 and the option as asked", n.Parent, n.Options[OptParent])
	}
	link := f.mustEndpoint(netA, ep1, "198.18.1.10/24")
	info, err := f.d.EndpointInfo(ctx, &network.InfoRequest{NetworkID: netA, EndpointID: ep1})
	if err != nil || info.Value["parent"] != "eth0" || info.Value["parent_option"] != "lana,eth0" {
		t.Fatalf("EndpointInfo = %v, %v; want parent eth0 and parent_option lana,eth0", info, err)
	}

	// lana appears while a container runs on eth0: the network stays.
	f.k.AddHostLink("lana", "device", 1500)
	f.mustCreate(netReq{id: netA, opts: map[string]string{OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" {
		t.Fatalf("with a joined endpoint the network moved to %s", n.Parent)
	}
	if f.k.Parent(link) != "eth0" {
		t.Fatalf("endpoint link %s now on %q", link, f.k.Parent(link))
	}
	// Left but not deleted, the endpoint still lives on eth0 (Docker
	// may join it again): the network stays.
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{id: netA, opts: map[string]string{OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" {
		t.Fatalf("with an endpoint not joined the network moved to %s", n.Parent)
	}
	// Once it is gone, the network moves to the first candidate.
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{id: netA, opts: map[string]string{OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "lana" || n.Options[OptParent] != "lana,eth0" {
		t.Fatalf("after the leave: link %s, option %q; want lana", n.Parent, n.Options[OptParent])
	}
	if _, ok := f.k.Link(link); ok {
		t.Errorf("the old endpoint link %s is left behind", link)
	}
	if _, err := f.endpoint(netA, ep1, "198.18.1.10/24", ""); err != nil {
		t.Fatalf("CreateEndpoint on the moved network: %v", err)
	}

	// The link under a joined network is gone (NICs renamed at a
	// reboot): it moves whatever the records say.
	f.mustCreate(netReq{id: netB, opts: map[string]string{OptParent: "lanb,eth1"}, v4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	f.mustEndpoint(netB, "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002", "198.18.2.10/24")
	f.k.Remove("eth1")
	f.k.AddHostLink("lanb", "device", 9000)
	f.mustCreate(netReq{id: netB, opts: map[string]string{OptParent: "lanb,eth1"}, v4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	if n, _ := f.record(netB); n.Parent != "lanb" {
		t.Fatalf("network B on %s after eth1 went, want lanb", n.Parent)
	}

	// Moving obeys the parent rules on the new link: netC resolves to
	// lanc, where an overlapping network lives, once eth0 is gone.
	f.k.AddHostLink("lanc", "device", 1500)
	f.mustCreate(netReq{id: netC, opts: map[string]string{OptParent: "lanc"}, v4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	f.mustCreate(netReq{id: netD4, opts: map[string]string{OptParent: "eth0,lanc"}, v4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	f.docker.setLive(netC)
	f.k.Remove("eth0")
	err = f.create(netReq{id: netD4, opts: map[string]string{OptParent: "eth0,lanc"}, v4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), short(netC)) || !strings.Contains(err.Error(), "nor move to lanc") {
		t.Fatalf("moving onto a link with an overlapping network: %v; want a conflict naming %s and the move", err, short(netC))
	}
	if n, ok := f.record(netD4); !ok || n.Parent != "eth0" {
		t.Fatalf("the refused move lost the record of network D (%v, on %q)", ok, n.Parent)
	}
}

// A move the new link refuses leaves a network whose old link still
// works where it was, and says nothing to Docker but success.
func TestRefusedMoveKeepsTheNetwork(t *testing.T) {
	f := newFixture(t)
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	x := netReq{id: netA, opts: map[string]string{OptParent: "lanq,eth1"}, v4: []string{"198.18.5.0/24,198.18.5.1/24"}}
	f.mustCreate(x)
	f.k.AddHostLink("lanq", "device", 1500)
	f.mustCreate(netReq{id: netB, opts: map[string]string{OptParent: "lanq"}, v4: []string{"198.18.5.0/25,198.18.5.1/25"}})
	f.docker.setLive(netA, netB)
	f.mustCreate(x) // lanq is its first candidate now, but B overlaps there
	if n, _ := f.record(netA); n.Parent != "eth1" {
		t.Fatalf("network A on %s, want it kept on eth1", n.Parent)
	}
	link := f.mustEndpoint(netA, ep1, "198.18.5.10/24")
	if f.k.Parent(link) != "eth1" {
		t.Fatalf("endpoint of A on %s, want eth1", f.k.Parent(link))
	}
	// B goes stale (Docker no longer knows it): the next create moves A.
	if err := f.d.Leave(context.Background(), &network.LeaveRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeleteEndpoint(context.Background(), &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.docker.setLive(netA)
	f.mustCreate(x)
	if n, _ := f.record(netA); n.Parent != "lanq" {
		t.Fatalf("network A on %s once B was stale, want lanq", n.Parent)
	}
	f.wantNetworks(netA)
}

func TestAutoParentThroughTheDriver(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	eth1, _ := f.k.Link("eth1")
	f.d.routes = routeList{{Dst: netip.MustParsePrefix("198.18.1.0/24"), LinkIndex: eth1.Index, Table: netlinkutil.MainTable}}
	f.mustCreate(netReq{id: netA, opts: map[string]string{OptParent: "auto"}})
	if n, _ := f.record(netA); n.Parent != "eth1" || n.Options[OptParent] != "auto" {
		t.Fatalf("record: link %s, option %q; want eth1 (its connected route holds the subnet) and auto", n.Parent, n.Options[OptParent])
	}
	// AllocateNetwork checks the syntax only: the manager may have no such
	// links or routes.
	if _, err := f.d.AllocateNetwork(ctx, &network.AllocateNetworkRequest{NetworkID: netB, Options: map[string]string{OptParent: "auto.7"}}); err != nil {
		t.Errorf("AllocateNetwork(parent=auto.7): %v", err)
	}
	if _, err := f.d.AllocateNetwork(ctx, &network.AllocateNetworkRequest{NetworkID: netB, Options: map[string]string{OptParent: "auto.0"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllocateNetwork(parent=auto.0) = %v, want a refusal", err)
	}
	// Without a route view, auto is refused with the fix.
	f.d.routes = nil
	if err := f.create(netReq{id: netB, opts: map[string]string{OptParent: "auto"}, v4: []string{"198.18.2.0/24,198.18.2.1/24"}}); err == nil || !strings.Contains(err.Error(), "-o parent=IFACE") {
		t.Errorf("auto without routes: %v", err)
	}
}

// A move takes the host link along and deletes the owned VLAN it leaves.
func TestMoveTakesTheHostLinkAndReleasesTheOwnedVLAN(t *testing.T) {
	f := newFixture(t)
	r := withHost(netA, "lanh.10,eth0.10", "198.18.1.5")
	f.mustCreate(r)
	shim := shimName(netA)
	if f.k.Parent(shim) != "eth0.10" {
		t.Fatalf("host link on %q, want eth0.10", f.k.Parent(shim))
	}
	f.k.AddHostLink("lanh", "device", 1500)
	f.mustCreate(r)
	if n, _ := f.record(netA); n.Parent != "lanh.10" {
		t.Fatalf("network on %s, want lanh.10", n.Parent)
	}
	if f.k.Parent(shim) != "lanh.10" {
		t.Errorf("host link on %q after the move, want lanh.10", f.k.Parent(shim))
	}
	if _, ok := f.k.Link("eth0.10"); ok {
		t.Errorf("the VLAN eth0.10 underlay created is left behind with nothing on it")
	}
	if l, ok := f.k.Link("lanh.10"); !ok || l.Alias != f.d.mark {
		t.Errorf("lanh.10 = %+v, %v: want a VLAN carrying underlay's mark", l, ok)
	}
}
