package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// badRequest is one invalid request and what its error must name.
type badRequest struct {
	name, route string
	body        any
	want        []string
}

func createBody(id string, generic map[string]any, v4, v6 []map[string]any, extra map[string]any) map[string]any {
	opts := map[string]any{"com.docker.network.generic": generic}
	for k, v := range extra {
		opts[k] = v
	}
	b := map[string]any{"NetworkID": id, "Options": opts}
	if v4 != nil {
		b["IPv4Data"] = v4
	}
	if v6 != nil {
		b["IPv6Data"] = v6
	}
	return b
}

func pool(p string) []map[string]any { return []map[string]any{{"Pool": p}} }

func badRequests(endpointLink string) []badRequest {
	v4 := pool("198.18.5.0/24")
	g := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cn := func(name string, generic map[string]any, want ...string) badRequest {
		return badRequest{name, "CreateNetwork", createBody(netC, generic, v4, nil, nil), want}
	}
	return []badRequest{
		{"truncated JSON", "CreateNetwork", `{"NetworkID":"x",`, []string{"not a valid JSON"}},
		{"JSON array", "CreateNetwork", `[1,2,3]`, []string{"not a valid JSON"}},
		{"not JSON", "Join", `hello`, []string{"not a valid JSON"}},
		{"NetworkID a number", "CreateNetwork", `{"NetworkID":42}`, []string{"NetworkID"}},
		{"IPv4Data a string", "CreateNetwork", `{"NetworkID":"x","IPv4Data":"198.18.5.0/24"}`, []string{"IPv4Data"}},
		{"Interface a list", "CreateEndpoint", `{"NetworkID":"x","EndpointID":"y","Interface":[]}`, []string{"Interface"}},
		{"huge body", "CreateNetwork", `{"NetworkID":"` + strings.Repeat("x", 2<<20) + `"}`, []string{"larger than"}},
		{"no NetworkID", "CreateNetwork", createBody("", g("parent", "vp0"), v4, nil, nil), []string{"NetworkID"}},
		{"generic not an object", "CreateNetwork", map[string]any{"NetworkID": netC, "Options": map[string]any{"com.docker.network.generic": "parent=vp0"}, "IPv4Data": v4}, []string{"com.docker.network.generic"}},
		{"option value a number", "CreateNetwork", createBody(netC, map[string]any{"parent": "vp0", "mtu": 1400}, v4, nil, nil), []string{`"mtu"`}},
		cn("unknown option", g("parent", "vp0", "vlan", "10"), `"vlan"`, "parent"),
		cn("unknown type", g("parent", "vp0", "type", "bridge"), `"bridge"`, "macvlan"),
		cn("invalid macvlan mode", g("parent", "vp0", "macvlan_mode", "source"), `"source"`),
		cn("invalid ipvlan mode", g("parent", "vp0", "ipvlan_mode", "l4"), `"l4"`),
		cn("invalid ipvlan flag", g("parent", "vp0", "ipvlan_flag", "open"), `"open"`),
		cn("macvlan_mode on ipvlan", g("parent", "vp0", "type", "ipvlan", "macvlan_mode", "bridge"), "macvlan_mode=bridge"),
		cn("ipvlan_mode on macvlan", g("parent", "vp0", "type", "macvlan", "ipvlan_mode", "l2"), "ipvlan_mode=l2"),
		cn("VLAN 0", g("parent", "vp0.0"), "VLAN 0"),
		cn("VLAN 4095", g("parent", "vp0.4095"), "VLAN 4095"),
		cn("name over 15 bytes", g("parent", "abcdefghijklmnop"), "abcdefghijklmnop", "15 bytes"),
		cn("long IFACE.VID with a VLAN ID out of range", g("parent", "vp0.123456789012"), "vp0.123456789012", "VLAN 123456789012", "1-4094"),
		cn("empty parent candidate", g("parent", "vp0,,vp1"), `"vp0,,vp1"`, "empty candidate"),
		cn("candidate listed twice", g("parent", "vp0,vp1,vp0"), "lists vp0 twice"),
		cn("auto among candidates", g("parent", "vp0,auto"), "auto cannot be one of several"),
		cn("auto with VLAN 0", g("parent", "auto.0"), `"auto.0"`, "1 to 4094"),
		cn("no candidate exists", g("parent", "nosuch0,nosuch1"), "none of the parent candidates nosuch0, nosuch1", "vp0"),
		cn("lo", g("parent", "lo"), "lo", "loopback"),
		cn("VLAN on lo", g("parent", "lo.10"), "loopback"),
		cn("missing parent", g("parent", "nosuch0"), "nosuch0", "does not exist"),
		cn("Docker's default bridge", g("parent", "docker0"), "docker0", "Docker manages"),
		cn("Docker's network bridge", g("parent", "br-0123456789ab"), "br-0123456789ab", "Docker manages"),
		cn("Docker's gwbridge", g("parent", "docker_gwbridge"), "docker_gwbridge", "Docker manages"),
		cn("underlay's own endpoint link", g("parent", endpointLink), endpointLink, "endpoint link"),
		cn("MTU below 68", g("parent", "vp0", "mtu", "60"), `"60"`),
		cn("MTU not a number", g("parent", "vp0", "mtu", "jumbo"), `"jumbo"`),
		cn("MTU above the parent's", g("parent", "vp0", "mtu", "9000"), "mtu 9000", "1500"),
		{"overlapping pools in one network", "CreateNetwork", createBody(netC, g("parent", "vp1"), []map[string]any{{"Pool": "198.18.5.0/24"}, {"Pool": "198.18.5.128/25"}}, nil, nil), []string{"198.18.5.128/25", "overlap"}},
		{"pool overlapping a network on the parent", "CreateNetwork", createBody(netC, g("parent", "vp0"), pool("198.18.1.0/25"), nil, nil), []string{"aaaaaaaaaaaa", "overlaps"}},
		{"broken IPv6 pool", "CreateNetwork", createBody(netC, g("parent", "vp1"), v4, pool("2001:db8::1::/64"), nil), []string{"2001:db8::1::/64"}},
		{"IPv4 pool as IPv6", "CreateNetwork", createBody(netC, g("parent", "vp1"), v4, pool("198.18.6.0/24"), nil), []string{"198.18.6.0/24", "IPv6"}},
		{"IPv6 gateway outside its pool", "CreateNetwork", createBody(netC, g("parent", "vp1"), v4, []map[string]any{{"Pool": "2001:db8:5::/64", "Gateway": "2001:db8:6::1/64"}}, nil), []string{"2001:db8:6::1", "outside"}},
		{"IPv4 gateway garbage", "CreateNetwork", createBody(netC, g("parent", "vp1"), []map[string]any{{"Pool": "198.18.5.0/24", "Gateway": "gateway"}}, nil, nil), []string{`"gateway"`}},
		{"missing IPAM data", "CreateNetwork", createBody(netC, g("parent", "vp1"), nil, nil, nil), []string{"no IPAM data"}},
		{"empty pool", "CreateNetwork", createBody(netC, g("parent", "vp1"), []map[string]any{{"Pool": ""}}, nil, nil), []string{"no Pool"}},
		{"null pool entry", "CreateNetwork", createBody(netC, g("parent", "vp1"), []map[string]any{nil}, nil, nil), []string{"no Pool"}},
		{"internal not a boolean", "CreateNetwork", createBody(netC, g("parent", "vp1"), v4, nil, map[string]any{"com.docker.network.internal": "perhaps"}), []string{"com.docker.network.internal", `"perhaps"`}},
		{"invalid MAC", "CreateEndpoint", map[string]any{"NetworkID": netA, "EndpointID": epC, "Interface": map[string]any{"MacAddress": "02:42:zz:00:00:01"}}, []string{"02:42:zz:00:00:01"}},
		{"multicast MAC", "CreateEndpoint", map[string]any{"NetworkID": netA, "EndpointID": epC, "Interface": map[string]any{"MacAddress": "01:00:5e:00:00:01"}}, []string{"multicast"}},
		{"IPv6 address as IPv4", "CreateEndpoint", map[string]any{"NetworkID": netA, "EndpointID": epC, "Interface": map[string]any{"Address": "2001:db8::5/64"}}, []string{"2001:db8::5/64"}},
		{"endpoint on unknown network", "CreateEndpoint", map[string]any{"NetworkID": netC, "EndpointID": epC}, []string{"cccccccccccc", "unknown"}},
		{"join unknown endpoint", "Join", map[string]any{"NetworkID": netA, "EndpointID": epC}, []string{"ecececececec", "unknown"}},
		{"join without endpoint ID", "Join", map[string]any{"NetworkID": netA}, []string{"EndpointID"}},
		{"AllocateNetwork unknown option", "AllocateNetwork", map[string]any{"NetworkID": netC, "Options": map[string]any{"prent": "vp0"}}, []string{`"prent"`}},
	}
}

// TestBadInputs sends each invalid request to the real binary: each gets
// an error naming the problem, and neither the links nor the state file
// change.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	for _, br := range []struct{ name, kind string }{{"docker0", "bridge"}, {"br-0123456789ab", "bridge"}, {"docker_gwbridge", "bridge"}} {
		if err := ns.NL.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br.name}}); err != nil {
			t.Fatal(err)
		}
	}
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	_, j := d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	before := d.CheckConsistent()
	linksBefore := ns.LinkNames()

	reqs := badRequests(j.InterfaceName.SrcName)
	if len(reqs) < 30 {
		t.Fatalf("only %d bad inputs", len(reqs))
	}
	for _, br := range reqs {
		msg := d.Call(br.route, br.body, nil)
		if msg == "" {
			t.Errorf("%s: accepted", br.name)
			continue
		}
		for _, w := range br.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not name %q", br.name, msg, w)
			}
		}
	}
	if fmt.Sprint(ns.LinkNames()) != fmt.Sprint(linksBefore) {
		t.Fatalf("links changed: %v, before %v", ns.LinkNames(), linksBefore)
	}
	after := d.CheckConsistent()
	b1, _ := json.Marshal(before)
	b2, _ := json.Marshal(after)
	if string(b1) != string(b2) {
		t.Fatalf("state changed:\nbefore %s\nafter  %s", b1, b2)
	}
	t.Logf("%d invalid requests refused with errors naming the problem; state unchanged", len(reqs))
}
