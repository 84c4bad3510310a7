package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// What current engines ask of remote drivers, at the protocol level
// through the real binary: GwAllocChecker in the capabilities and its
// GwAllocCheck (no gateway address reserved for internal and ipvlan l3
// networks), and Join's DstName for com.docker.network.endpoint.ifname.
func TestCurrentEngineProtocol(t *testing.T) {
	t.Parallel()
	_, d := setup(t, itest.DaemonOptions{})
	post := func(route string, req any) map[string]any {
		t.Helper()
		code, body, err := d.Post("/NetworkDriver."+route, req)
		if err != nil || code != 200 {
			t.Fatalf("%s: %d %s %v", route, code, body, err)
		}
		var out map[string]any
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("%s answered %s: %v", route, body, err)
		}
		return out
	}
	if caps := post("GetCapabilities", struct{}{}); caps["GwAllocChecker"] != true || caps["Scope"] != "local" {
		t.Fatalf("GetCapabilities answered %v: want GwAllocChecker true", caps)
	}
	for _, tc := range []struct {
		opts map[string]any
		skip bool
	}{
		{map[string]any{"com.docker.network.generic": map[string]any{"parent": "vp0"}}, false},
		{map[string]any{"com.docker.network.generic": map[string]any{"parent": "vp0", "ipvlan_mode": "l3"}}, true},
		{map[string]any{"com.docker.network.generic": map[string]any{"parent": "vp0"}, "com.docker.network.internal": true}, false},
		{map[string]any{"com.docker.network.generic": map[string]any{}, "com.docker.network.internal": true}, true},
	} {
		r := post("GwAllocCheck", map[string]any{"Options": tc.opts})
		if r["SkipIPv4"] != tc.skip || r["SkipIPv6"] != tc.skip {
			t.Errorf("GwAllocCheck %v answered %v, want skip %v", tc.opts, r, tc.skip)
		}
	}
	code, body, _ := d.Post("/NetworkDriver.GwAllocCheck", map[string]any{"Options": map[string]any{"com.docker.network.generic": map[string]any{"parent": "vp0", "mtu": "x"}}})
	if code == 200 || !strings.Contains(string(body), "mtu") {
		t.Errorf("GwAllocCheck of a bad option: %d %s, want the refusal CreateNetwork would give", code, body)
	}

	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
		Interface: &network.EndpointInterface{Address: "198.18.1.10/24"}, Options: map[string]any{"com.docker.network.endpoint.ifname": "lan7"}}, nil)
	j := post("Join", network.JoinRequest{NetworkID: netA, EndpointID: epA, SandboxKey: "/var/run/docker/netns/x"})
	name, _ := j["InterfaceName"].(map[string]any)
	if name["DstName"] != "lan7" || name["DstPrefix"] != "eth" {
		t.Fatalf("Join answered InterfaceName %v: want DstName lan7 and DstPrefix eth", name)
	}
	msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epB,
		Interface: &network.EndpointInterface{Address: "198.18.1.11/24"}, Options: map[string]any{"com.docker.network.endpoint.ifname": "lo"}}, nil)
	if !strings.Contains(msg, "reserved") {
		t.Fatalf("an ifname of lo: %q, want it refused", msg)
	}
}
