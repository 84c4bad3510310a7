package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/docs"
	"github.com/underlay-net/underlay/internal/itest"
	"golang.org/x/sys/unix"
)

// TestMetrics: the real binary counts its requests by route and outcome,
// its conflicts, and reads its gauges from the state file, on GET /metrics
// of the plugin socket, and the same on --metrics-listen (TCP, here
// 127.0.0.1 of the daemon's namespace).
func TestMetrics(t *testing.T) {
	t.Parallel()
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
	// The metrics reference of docs/operating.md is what the daemon
	// exposes, every family of it.
	documented, err := docs.MetricsReference()
	if err != nil {
		t.Fatal(err)
	}
	var exposed []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE underlay_"); ok {
			name, _, _ := strings.Cut(f, " ")
			exposed = append(exposed, "underlay_"+name)
		}
	}
	slices.Sort(exposed)
	slices.Sort(documented)
	if !slices.Equal(exposed, documented) {
		t.Errorf("the daemon exposes the metrics %q; docs/operating.md documents %q", exposed, documented)
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
	if !d.WaitLog(5*time.Second, "serving metrics over TCP") { // logged beside the listener's serving, not before it
		t.Error("the TCP metrics address was not logged")
	}
}

// TestMetricsTCPFloodLeavesPluginSocket: clients of --metrics-listen
// cannot take the descriptors the plugin socket needs. With the daemon's
// open-file limit at 1024 (a common default), 1,126 connections to the
// metrics port, each with a keep-alive scrape sent and never closed, used
// to stop the plugin socket ("accept4: too many open files"). Now the
// daemon holds at most a few dozen of them at once (the rest wait in the
// kernel's accept queue), closes idle ones, and the plugin socket and
// the socket's /metrics keep answering; once the flood ends, TCP scrapes
// are answered again.
func TestMetricsTCPFloodLeavesPluginSocket(t *testing.T) {
	// Serial: a flood of 1,126 connections (load).
	itest.RequireRoot(t)
	docker := itest.NewFakeDocker(t)
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	addr := fmt.Sprintf("127.0.0.1:%d", ns.FreePort())
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host(), "--metrics-listen", addr}})
	// The daemon's limit is 1024, and the flood 10 % more, unless this
	// process cannot open that many itself (Go raised its soft limit to
	// the hard one): then half of what it can.
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: min(1024, own.Cur/2), Max: min(1024, own.Cur/2)}
	if err := unix.Prlimit(d.Pid(), unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatalf("lower the daemon's open-file limit: %v", err)
	}
	flood := int(limit.Cur + limit.Cur/10)
	fds := func() int {
		t.Helper()
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err := ns.Do(func() error {
		for i := 0; i < flood; i++ {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			conns = append(conns, c)
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n"); err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("open %d connections to %s: %v", flood, addr, err)
	}
	// Until the daemon has taken what it takes of them: the count is the
	// same for a second (or 10 s have passed).
	most, last, same := 0, -1, 0
	for i := 0; i < 100 && same < 10; i++ {
		n := fds()
		most = max(most, n)
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	// 32 connections at most, and slack for the daemon's own descriptors.
	if most > before+32+64 {
		t.Errorf("the daemon holds %d descriptors with %d metrics clients connected (%d before): the metrics port is not capped", most, flood, before)
	}
	// The plugin socket answers, real work included, and its /metrics.
	if code, body, err := activate(d.Socket, 20*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("Plugin.Activate during the flood: %d %s %v", code, body, err)
	}
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	if code, _, err := d.Get("/metrics"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics on the socket during the flood: %d %v", code, err)
	}
	// The first connection was let in and answered; its keep-alive
	// connection is closed by the server once idle (10 s), not kept.
	c := conns[0]
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the first scrape of the flood: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Errorf("the idle keep-alive connection was not closed by the server within 60 s: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, err := ns.HTTPGet("http://" + addr + "/metrics")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TCP scrape answered within 60 s of the flood's end: %d %v", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if log := d.Log(); strings.Contains(log, "too many open files") {
		t.Errorf("the daemon ran out of descriptors:\n%s", log)
	}
}

// activate asks /Plugin.Activate on sock with its own deadline (the kit's
// client waits two minutes).
func activate(sock string, within time.Duration) (int, []byte, error) {
	c, err := net.DialTimeout("unix", sock, within)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(within))
	if _, err := io.WriteString(c, "POST /Plugin.Activate HTTP/1.1\r\nHost: underlay\r\nContent-Length: 0\r\n\r\n"); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
