package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Fuzz targets: option parsing, CreateNetwork decoding and validation, and
// every route of the HTTP handler. Seeds live in testdata/fuzz; `make
// test` runs each target for a bounded time (test/fuzz.sh).

func FuzzParseOptions(f *testing.F) {
	f.Add("parent", "eth0.10", "type", "ipvlan", "mtu", "1400")
	f.Add("macvlan_mode", "passthru", "ipvlan_flag", "vepa", "", "")
	f.Add("ipvlan_mode", "l3s", "parent", "", "mtu", "-1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		opts := map[string]string{k1: v1, k2: v2, k3: v3}
		o, err := parseOptions(opts)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid request") {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		if o.Type != typeMacvlan && o.Type != typeIpvlan {
			t.Fatalf("accepted type %q", o.Type)
		}
		if o.MTU != 0 && (o.MTU < minMTU || o.MTU > maxMTU) {
			t.Fatalf("accepted mtu %d", o.MTU)
		}
		// Every name in the parent option (one, or each candidate of a
		// list) fits the kernel's 15 bytes, unless it is IFACE.VID with a
		// base that does (the resolver explains the VLAN's name), and none
		// is lo.
		spec, err := parseParent(o.Parent)
		if err != nil {
			t.Fatalf("parseOptions accepted parent %q that parseParent refuses: %v", o.Parent, err)
		}
		for _, c := range spec.Candidates {
			if (len(c) > 15 && !longVLAN(c)) || c == "lo" {
				t.Fatalf("accepted parent %q (candidate %q)", o.Parent, c)
			}
		}
	})
}

func FuzzCreateNetworkRequest(f *testing.F) {
	f.Add([]byte(`{"NetworkID":"n","Options":{"com.docker.network.generic":{"parent":"eth0"}},"IPv4Data":[{"Pool":"198.18.1.0/24","Gateway":"198.18.1.1/24"}]}`))
	f.Add([]byte(`{"NetworkID":"n","Options":{"com.docker.network.internal":true,"com.docker.network.enable_ipv6":"true"},"IPv6Data":[{"Pool":"2001:db8::/64"}]}`))
	f.Add([]byte(`{"NetworkID":"n","IPv4Data":[null,{"Pool":"x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req network.CreateNetworkRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		n, err := parseNetwork(&req)
		if err != nil {
			return
		}
		if n.ID == "" || n.Parent == "" || len(n.IPv4)+len(n.IPv6) == 0 {
			t.Fatalf("accepted an incomplete network %+v", n)
		}
		// Whatever was accepted round-trips to the same decision.
		if d := decide(n, &n, nil); d.Verdict != reuse {
			t.Fatalf("a network is not reused against itself: %+v", d)
		}
	})
}

// routes are the paths FuzzRoutes picks from by index.
var fuzzRoutes = []string{
	"/Plugin.Activate", "/NetworkDriver.GetCapabilities", "/NetworkDriver.CreateNetwork", "/NetworkDriver.AllocateNetwork",
	"/NetworkDriver.DeleteNetwork", "/NetworkDriver.FreeNetwork", "/NetworkDriver.CreateEndpoint", "/NetworkDriver.DeleteEndpoint",
	"/NetworkDriver.EndpointOperInfo", "/NetworkDriver.Join", "/NetworkDriver.Leave", "/NetworkDriver.DiscoverNew",
	"/NetworkDriver.DiscoverDelete", "/NetworkDriver.ProgramExternalConnectivity", "/NetworkDriver.RevokeExternalConnectivity",
	"/NetworkDriver.GwAllocCheck",
}

func FuzzRoutes(f *testing.F) {
	fx := newFixture(f)
	h := fx.d.Handler()
	f.Add(uint8(2), []byte(`{"NetworkID":"`+netA+`","Options":{"com.docker.network.generic":{"parent":"eth0"}},"IPv4Data":[{"Pool":"198.18.1.0/24"}]}`))
	f.Add(uint8(6), []byte(`{"NetworkID":"`+netA+`","EndpointID":"`+epA+`","Interface":{"Address":"198.18.1.2/24","MacAddress":""}}`))
	f.Add(uint8(9), []byte(`{"NetworkID":"`+netA+`","EndpointID":"`+epA+`","SandboxKey":"x"}`))
	f.Add(uint8(10), []byte(`{"NetworkID":"`+netA+`","EndpointID":"`+epA+`"}`))
	f.Add(uint8(7), []byte(`{"NetworkID":"`+netA+`","EndpointID":"`+epA+`"}`))
	f.Add(uint8(4), []byte(`{"NetworkID":"`+netA+`"}`))
	f.Add(uint8(3), []byte(`{"NetworkID":"x","Options":{"parent":"eth1","type":"ipvlan"}}`))
	f.Add(uint8(11), []byte(`{"DiscoveryType":1,"DiscoveryData":[1,2]}`))
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s answered non-JSON %q", path, rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			msg, _ := out["Err"].(string)
			if msg == "" {
				t.Fatalf("%s answered %d without Err: %q", path, rec.Code, rec.Body.String())
			}
			if strings.Contains(msg, "internal error") {
				t.Fatalf("%s panicked on %q: %s", path, body, msg)
			}
		}
	})
}

// FuzzParseParent: any parent option is parsed without panicking, and
// whatever parses resolves over a node's links and routes to a link or a
// refusal of the request (ErrInvalid).
func FuzzParseParent(f *testing.F) {
	for _, seed := range []string{"eth0", "eth0.10", "ens3,ens4", "auto", "auto.10", "auto.x", ",", "a,,b", "auto,eth0", "lo.1", "ens3.20,eth0.010"} {
		f.Add(seed, "198.18.40.0/24")
	}
	routes := []netlinkutil.Route{rt("198.18.40.0/24", 2, 0, ""), rt("0.0.0.0/0", 3, 0, "198.18.60.1")}
	f.Fuzz(func(t *testing.T, parent, subnet string) {
		if _, err := parseParent(parent); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parseParent(%q) = %v, not ErrInvalid", parent, err)
			}
			return
		}
		n := asking(parent)
		n.IPv4 = []store.Pool{{Subnet: subnet}}
		if _, err := resolveParent(n, nodeLinks(), routes); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("resolveParent(%q, %q) = %v, not ErrInvalid", parent, subnet, err)
		}
	})
}
