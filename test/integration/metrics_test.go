package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestMetrics: the real binary counts its requests by route and outcome,
// its conflicts, and reads its gauges from the state file, on GET /metrics
// of the plugin socket, and the same on --metrics-listen (TCP, here
// 127.0.0.1 of the daemon's namespace).
func TestMetrics(t *testing.T) {
	itest.RequireRoot(t)
	docker := itest.NewFakeDocker(t)
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	ns.AddVeth("vp1", "vp1-peer", 9000)
	addr := fmt.Sprintf("127.0.0.1:%d", ns.FreePort())
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host(), "--metrics-listen", addr}})

	create := func(n itest.Net, status int) {
		t.Helper()
		code, body, err := d.Post("/NetworkDriver.CreateNetwork", n.Request())
		if err != nil || code != status {
			t.Fatalf("CreateNetwork %s: %d %s (%v), want %d", n.ID[:12], code, body, err, status)
		}
	}
	create(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}, http.StatusOK)
	create(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0", "colour": "blue"}, V4: []string{"198.18.2.0/24"}}, http.StatusBadRequest)
	docker.SetLive(netA)
	create(itest.Net{ID: netC, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/25"}}, http.StatusConflict)
	d.MustIPAMCall("GetCapabilities", nil, nil)

	code, body, err := d.Get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics on the socket: %d %s (%v)", code, body, err)
	}
	got, err := itest.Metrics(string(body))
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`underlay_requests_total{outcome="ok",route="NetworkDriver.CreateNetwork"}`:                       1,
		`underlay_requests_total{outcome="invalid",route="NetworkDriver.CreateNetwork"}`:                  1,
		`underlay_requests_total{outcome="conflict",route="NetworkDriver.CreateNetwork"}`:                 1,
		`underlay_requests_total{outcome="ok",route="IpamDriver.GetCapabilities"}`:                        1,
		`underlay_request_duration_seconds_count{outcome="conflict",route="NetworkDriver.CreateNetwork"}`: 1,
		`underlay_conflicts_refused_total`:                                                                1,
		`underlay_stale_holders_removed_total`:                                                            0,
		`underlay_networks`:                                                                               1,
		`underlay_endpoints`:                                                                              0,
		`underlay_owned_links`:                                                                            0,
		`underlay_reservations_rolled_back_total{kind="network"}`:                                         0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	// Only plugin routes are counted: the readiness probes
	// (/Plugin.Activate) and /metrics itself are not.
	for series := range got {
		if strings.HasPrefix(series, "underlay_requests_total") && !strings.Contains(series, `route="NetworkDriver.`) && !strings.Contains(series, `route="IpamDriver.`) {
			t.Errorf("series of a route that is not the plugin's: %s", series)
		}
	}
	if !strings.Contains(string(body), "\nunderlay_build_info{version=") || !strings.Contains(string(body), "\nunderlay_store_commit_seconds_count ") {
		t.Errorf("no build info or commit histogram in:\n%s", body)
	}

	// The same text over TCP (no request in between: the counters agree).
	code, tcpBody, err := ns.HTTPGet("http://" + addr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %s (%v)", addr, code, tcpBody, err)
	}
	tcp, err := itest.Metrics(string(tcpBody))
	if err != nil {
		t.Fatal(err)
	}
	for series, v := range got {
		if strings.HasPrefix(series, "underlay_") && !strings.HasPrefix(series, "underlay_store_commit") && tcp[series] != v {
			t.Errorf("over TCP %s = %v, on the socket %v", series, tcp[series], v)
		}
	}
	if !strings.Contains(d.Log(), "serving metrics over TCP") {
		t.Error("the TCP metrics address was not logged")
	}
}
