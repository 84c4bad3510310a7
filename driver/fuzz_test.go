package driver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
)

// Fuzz targets: option parsing, CreateNetwork decoding and validation, and
// every route of the HTTP handler. Seeds live in testdata/fuzz; `make
// test` runs each target for a bounded time (test/fuzz.sh).

func FuzzCreateNetworkRequest(f *testing.F) {
	f.Add([]byte(`{"NetworkID":"n","Options":{"com.docker.network.generic":{"parent":"eth0"}},"IPv4Data":[{"Pool":"198.18.1.0/24","Gateway":"198.18.1.1/24"}]}`))
	f.Add([]byte(`{"NetworkID":"n","Options":{"com.docker.network.internal":true,"com.docker.network.enable_ipv6":"true"},"IPv6Data":[{"Pool":"2001:db8::/64"}]}`))
	f.Add([]byte(`{"NetworkID":"n","IPv4Data":[null,{"Pool":"x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req network.CreateNetworkRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		n, err := config.ParseNetwork(&req)
		if err != nil {
			return
		}
		if n.ID == "" || n.Parent == "" || len(n.IPv4)+len(n.IPv6) == 0 {
			t.Fatalf("accepted an incomplete network %+v", n)
		}
		// Whatever was accepted round-trips to the same decision.
		if d := plan.Decide(n, &n, nil); d.Verdict != plan.VerdictReuse {
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
