package plan

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

func TestParseParent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want config.ParentSpec
		err  []string
	}{
		{in: "", want: config.ParentSpec{}},
		{in: "eth0", want: config.ParentSpec{Candidates: []string{"eth0"}}},
		{in: "eth0.10", want: config.ParentSpec{Candidates: []string{"eth0.10"}}},
		{in: "lan-a,lan-b,lan-c", want: config.ParentSpec{Candidates: []string{"lan-a", "lan-b", "lan-c"}}},
		{in: "eth0.10,ens3.10", want: config.ParentSpec{Candidates: []string{"eth0.10", "ens3.10"}}},
		{in: "auto", want: config.ParentSpec{Auto: true}},
		{in: "auto.10", want: config.ParentSpec{Auto: true, VLAN: 10}},
		{in: "auto.4094", want: config.ParentSpec{Auto: true, VLAN: 4094}},
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
			got, err := config.ParseParent(tc.in)
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
	if !errors.Is(err, pluginapi.ErrInvalid) {
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
func nodeLinks() []kernel.Link {
	return []kernel.Link{
		{Name: "lo", Index: 1, Kind: "device", MTU: 65536},
		{Name: "ens3", Index: 2, Kind: "device", MTU: 1500},
		{Name: "ens4", Index: 3, Kind: "device", MTU: 1500},
		{Name: "shim0", Index: 4, Kind: "macvlan", ParentIndex: 2, MTU: 1500},
		{Name: "ens3.20", Index: 5, Kind: "vlan", ParentIndex: 2, VLAN: 20, MTU: 1500},
		{Name: "docker0", Index: 6, Kind: "bridge", MTU: 1500},
		{Name: config.DummyName(drivertest.NetB), Index: 7, Kind: "dummy", MTU: 1500},
	}
}

func rt(dst string, index, metric int, gw string) kernel.Route {
	r := kernel.Route{Dst: netip.MustParsePrefix(dst), LinkIndex: index, Table: kernel.MainTable, Priority: metric}
	if gw != "" {
		r.Gateway = netip.MustParseAddr(gw)
	}
	return r
}

func TestPerNodeResolution(t *testing.T) {
	withSubnet := func(parent, subnet string) record.Network {
		n := asking(parent)
		n.IPv4 = []record.Pool{{Subnet: subnet}}
		return n
	}
	lanRoutes := []kernel.Route{
		rt("198.18.40.0/24", 2, 0, ""),                                           // ens3's LAN
		rt("198.18.60.0/24", 3, 0, ""),                                           // ens4's LAN
		rt("0.0.0.0/0", 2, 100, "198.18.40.1"),                                   // default via ens3
		rt("198.18.40.77/32", 4, 0, ""),                                          // a user's shim route to a container
		{Dst: netip.MustParsePrefix("198.18.40.5/32"), LinkIndex: 2, Table: 255}, // local table: ignored
	}
	for _, tc := range []struct {
		name   string
		n      record.Network
		links  []kernel.Link
		routes []kernel.Route
		want   string
		create *record.ParentLink
		why    string
		err    []string
	}{
		{name: "first candidate that exists", n: asking("eth0,ens3,ens4"), want: "ens3", why: "candidate 2 of 3"},
		{name: "order of the list wins", n: asking("ens4,ens3"), want: "ens4", why: "candidate 1 of 2"},
		{name: "VLAN candidate counts when its base exists", n: asking("eth0.10,ens3.10"), want: "ens3.10", why: "candidate 2 of 2",
			create: &record.ParentLink{Name: "ens3.10", Kind: kernel.KindVLAN, Base: "ens3", VLAN: 10}},
		{name: "VLAN candidate finds the existing VLAN", n: asking("eth0.20,ens3.20"), want: "ens3.20"},
		{name: "no candidate exists", n: asking("eth0,enp0s31f6"),
			err: []string{"none of the parent candidates eth0, enp0s31f6 exists on this host", "(its interfaces: ens3, ens3.20, ens4, shim0)", "-o parent=eth0,enp0s31f6,IFACE"}},
		{name: "the chosen candidate is still checked", n: asking("eth0,shim0,ens3"), err: []string{"shim0 is a macvlan link on ens3"}},
		{name: "auto: connected route of the subnet", n: withSubnet("auto", "198.18.60.0/24"), routes: lanRoutes, want: "ens4",
			why: "connected route 198.18.60.0/24 holds the subnet 198.18.60.0/24"},
		{name: "auto: a route on a macvlan shim counts for its lower link", n: withSubnet("auto", "198.18.40.77/32"), routes: lanRoutes, want: "ens3"},
		{name: "auto: a wider route holds the subnet", n: withSubnet("auto", "198.18.40.128/25"), routes: lanRoutes, want: "ens3"},
		{name: "auto: the most specific route wins", n: withSubnet("auto", "198.18.60.0/26"),
			routes: []kernel.Route{rt("198.18.0.0/16", 2, 0, ""), rt("198.18.60.0/24", 3, 0, "")}, want: "ens4"},
		{name: "auto: no connected route, default route", n: withSubnet("auto", "198.18.90.0/24"), routes: lanRoutes, want: "ens3",
			why: "default route uses it (no connected route holds the subnet 198.18.90.0/24)"},
		{name: "auto: no IPv4 subnet, default route", n: asking("auto"), routes: lanRoutes, want: "ens3"},
		{name: "auto: lowest metric default route", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []kernel.Route{rt("0.0.0.0/0", 2, 600, "198.18.40.1"), rt("0.0.0.0/0", 3, 100, "198.18.60.1")}, want: "ens4"},
		{name: "auto: IPv6 and other tables' defaults do not count", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []kernel.Route{rt("::/0", 3, 0, "2001:db8::1"), {Dst: netip.MustParsePrefix("0.0.0.0/0"), LinkIndex: 3, Table: 100}, rt("0.0.0.0/0", 2, 0, "198.18.40.1")}, want: "ens3"},
		{name: "auto: subnet on two links is refused naming them", n: withSubnet("auto", "198.18.40.0/24"),
			routes: []kernel.Route{rt("198.18.40.0/24", 2, 0, ""), rt("198.18.40.0/24", 3, 100, "")},
			err:    []string{"parent=auto", "198.18.40.0/24 is on several links", "ens3, ens4"}},
		{name: "auto: the same LAN through the NIC and its shim is one link", n: withSubnet("auto", "198.18.40.0/24"),
			routes: []kernel.Route{rt("198.18.40.0/24", 2, 0, ""), rt("198.18.40.0/24", 4, 0, "")}, want: "ens3"},
		{name: "auto: two default routes with one metric are refused", n: withSubnet("auto", "198.18.90.0/24"),
			routes: []kernel.Route{rt("0.0.0.0/0", 2, 0, "198.18.40.1"), rt("0.0.0.0/0", 3, 0, "198.18.60.1")},
			err:    []string{"default routes on several links (ens3, ens4)", "198.18.90.0/24"}},
		{name: "auto: nothing to go by", n: withSubnet("auto", "198.18.90.0/24"), routes: nil,
			err: []string{"no route of this host holds the subnet 198.18.90.0/24", "no IPv4 default route", "-o parent=IFACE"}},
		{name: "auto.VID: VLAN on the link auto picks", n: withSubnet("auto.30", "198.18.60.0/24"), routes: lanRoutes, want: "ens4.30",
			create: &record.ParentLink{Name: "ens4.30", Kind: kernel.KindVLAN, Base: "ens4", VLAN: 30}, why: "VLAN 30 on it"},
		{name: "auto.VID: the picked link is that VLAN", n: withSubnet("auto.20", "198.18.20.0/24"),
			routes: []kernel.Route{rt("198.18.20.0/24", 5, 0, "")}, want: "ens3.20"},
		{name: "auto.VID: the picked link is another VLAN: the VLAN goes on its base", n: withSubnet("auto.30", "198.18.20.0/24"),
			routes: []kernel.Route{rt("198.18.20.0/24", 5, 0, "")}, want: "ens3.30",
			create: &record.ParentLink{Name: "ens3.30", Kind: kernel.KindVLAN, Base: "ens3", VLAN: 30}},
		{name: "auto.VID: an existing VLAN of that ID is used", n: withSubnet("auto.20", "198.18.90.0/24"), routes: lanRoutes, want: "ens3.20"},
		{name: "auto: a WireGuard default route is refused naming the choice", n: withSubnet("auto", "198.18.99.0/24"),
			links:  append(nodeLinks(), kernel.Link{Name: "wg0", Index: 9, Kind: "wireguard", Encap: "none", MTU: 1420}),
			routes: []kernel.Route{rt("0.0.0.0/0", 9, 0, "")},
			err:    []string{"parent=auto chose wg0", "default route uses it", "wg0 is not an Ethernet link", "type none"}},
		{name: "candidates: Docker's links are not offered", n: asking("eth9,eth8"),
			links: append(nodeLinks(), kernel.Link{Name: "veth1a2b3c", Index: 10, Kind: "veth"}, kernel.Link{Name: "br-0123456789ab", Index: 11, Kind: "bridge"}),
			err:   []string{"(its interfaces: ens3, ens3.20, ens4, shim0)"}},
		{name: "auto: a Docker bridge is refused as usual", n: withSubnet("auto", "198.18.99.0/24"),
			routes: []kernel.Route{rt("198.18.99.0/24", 6, 0, "")}, err: []string{"docker0 is a bridge Docker manages"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := tc.links
			if links == nil {
				links = nodeLinks()
			}
			got, err := ResolveParent(tc.n, links, tc.routes)
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
	var links []kernel.Link
	for i := 0; i < 25; i++ {
		links = append(links, kernel.Link{Name: fmt.Sprintf("nic%02d", i), Index: i + 1, Kind: "device"})
	}
	got := hostLinkNames(links)
	if !strings.HasPrefix(got, "nic00, nic01") || !strings.HasSuffix(got, "nic19 and 5 more") {
		t.Errorf("hostLinkNames = %q, want 20 names and \"and 5 more\"", got)
	}
}

func TestKeepParent(t *testing.T) {
	joined := record.Endpoint{ID: "e1", Sandbox: "/var/run/docker/netns/x", Boot: "boot-1"}
	oldBoot := record.Endpoint{ID: "e2", Sandbox: "/var/run/docker/netns/y", Boot: "boot-0"}
	idle := record.Endpoint{ID: "e3"}
	for _, tc := range []struct {
		name   string
		exists bool
		eps    []record.Endpoint
		want   bool
	}{
		{name: "old link gone", exists: false, eps: []record.Endpoint{joined}, want: false},
		{name: "no endpoints", exists: true, want: false},
		{name: "an endpoint not joined yet (a container starting)", exists: true, eps: []record.Endpoint{idle}, want: true},
		{name: "joined in an earlier boot", exists: true, eps: []record.Endpoint{oldBoot}, want: false},
		{name: "only endpoints of an earlier boot", exists: true, eps: []record.Endpoint{oldBoot, oldBoot}, want: false},
		{name: "a container runs on it", exists: true, eps: []record.Endpoint{idle, joined}, want: true},
	} {
		if got := KeepParent(tc.exists, tc.eps, "boot-1"); got != tc.want {
			t.Errorf("%s: keepParent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecideMove(t *testing.T) {
	old := asking("lan-a,lan-b")
	old.Parent = "lan-a"
	want := old
	want.Parent = "lan-b"
	holder := drivertest.Macvlan(drivertest.NetB, "lan-b", "bridge", "198.18.1.0/24")
	if got := Decide(old, &old, nil); got.Verdict != VerdictReuse {
		t.Errorf("same link: %v, want reuse", got.Verdict)
	}
	got := Decide(want, &old, []record.Network{holder})
	if got.Verdict != VerdictMove || len(got.Conflicts) != 1 || got.Conflicts[0].Holder.ID != drivertest.NetB {
		t.Errorf("other link: %v with %d conflicts, want move with the overlapping holder on the new link", got.Verdict, len(got.Conflicts))
	}
}
