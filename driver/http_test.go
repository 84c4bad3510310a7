package driver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/pluginapi"
)

func post(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s answered non-JSON %q: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/vnd.docker.plugins.v1.1+json" {
		t.Fatalf("%s content type %q", path, ct)
	}
	return rec.Code, out
}

func TestHTTPRoutes(t *testing.T) {
	f := newFixture(t)
	h := f.d.Handler()
	code, out := post(t, h, "/Plugin.Activate", "")
	if code != 200 || out["Implements"].([]any)[0] != "NetworkDriver" {
		t.Fatalf("Activate: %d %v", code, out)
	}
	code, out = post(t, h, "/NetworkDriver.GetCapabilities", "")
	if code != 200 || out["Scope"] != "local" || out["ConnectivityScope"] != "global" {
		t.Fatalf("GetCapabilities: %d %v", code, out)
	}
	for _, tc := range []struct{ path, body string }{
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":"` + netA + `","Options":{"com.docker.network.generic":{"parent":"eth0"}},"IPv4Data":[{"Pool":"198.18.1.0/24","Gateway":"198.18.1.1/24"}]}`},
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":"` + netA + `","Options":{"com.docker.network.generic":{"parent":"eth0"}},"IPv4Data":[{"Pool":"198.18.1.0/24","Gateway":"198.18.1.1/24"}]}`},
		{"/NetworkDriver.DiscoverNew", `{"DiscoveryType":1,"DiscoveryData":{}}`},
		{"/NetworkDriver.DiscoverDelete", `{"DiscoveryType":1}`},
		{"/NetworkDriver.ProgramExternalConnectivity", `{"NetworkID":"n","EndpointID":"e","Options":{}}`},
		{"/NetworkDriver.RevokeExternalConnectivity", `{"NetworkID":"n","EndpointID":"e"}`},
		{"/NetworkDriver.FreeNetwork", `{"NetworkID":"n"}`},
		{"/NetworkDriver.DeleteEndpoint", `{"NetworkID":"n","EndpointID":"e"}`},
		{"/NetworkDriver.DeleteNetwork", `{"NetworkID":"unknown"}`},
	} {
		code, out := post(t, h, tc.path, tc.body)
		if code != 200 || len(out) != 0 {
			t.Fatalf("%s: %d %v, want 200 {}", tc.path, code, out)
		}
	}
	code, out = post(t, h, "/NetworkDriver.CreateEndpoint", `{"NetworkID":"`+netA+`","EndpointID":"`+epA+`","Interface":{"Address":"198.18.1.2/24"}}`)
	if code != 200 || out["Interface"].(map[string]any)["MacAddress"] == "" {
		t.Fatalf("CreateEndpoint: %d %v", code, out)
	}
	code, out = post(t, h, "/NetworkDriver.EndpointOperInfo", `{"NetworkID":"`+netA+`","EndpointID":"`+epA+`"}`)
	if code != 200 || out["Value"].(map[string]any)["link"] != "uleeaeaeaeaeaea" {
		t.Fatalf("EndpointOperInfo: %d %v", code, out)
	}
	code, out = post(t, h, "/NetworkDriver.AllocateNetwork", `{"NetworkID":"x","Options":{"parent":"eth0"}}`)
	if code != 200 || out["Options"].(map[string]any)["parent"] != "eth0" {
		t.Fatalf("AllocateNetwork: %d %v", code, out)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	f := newFixture(t)
	h := f.d.Handler()
	for _, tc := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":`, 400, "not a valid JSON"},
		{"/NetworkDriver.CreateNetwork", `[1,2]`, 400, "not a valid JSON"},
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":7}`, 400, "NetworkID"},
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":"x","Options":{"com.docker.network.generic":["a"]}}`, 400, "com.docker.network.generic"},
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":"x","IPv4Data":"pool"}`, 400, "IPv4Data"},
		{"/NetworkDriver.CreateNetwork", `{}`, 400, "NetworkID"},
		{"/NetworkDriver.Join", `{"NetworkID":"x"}`, 400, "EndpointID"},
		{"/NetworkDriver.CreateEndpoint", `{"NetworkID":"x","EndpointID":"e","Interface":{"MacAddress":5}}`, 400, "MacAddress"},
		{"/NetworkDriver.CreateNetwork", `{"NetworkID":"` + strings.Repeat("a", pluginapi.MaxBody) + `"}`, 413, "larger than"},
		{"/NetworkDriver.Nope", `{}`, 404, "NetworkDriver.Nope"},
	} {
		code, out := post(t, h, tc.path, tc.body)
		msg, _ := out["Err"].(string)
		if code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %.40q: %d %q, want %d and an Err mentioning %q", tc.path, tc.body, code, msg, tc.code, tc.want)
		}
	}
	f.wantNetworks()
}
