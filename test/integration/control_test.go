package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/internal/itest"
)

// rawRequest sends one HTTP/1.1 request on the daemon's socket as is and
// returns the answer (read within 30 s).
func rawRequest(t *testing.T, sock, req string) *http.Response {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("answer to %.40q: %v", req, err)
	}
	return resp
}

// TestControlHalfSentBodyDoesNotHoldShutdown: a client that sent a
// request's headers and half its body, then nothing, does not hold the
// daemon's SIGTERM shutdown up (it did for the whole 30 s shutdown
// timeout): the body is cut after a second's grace, the client is told
// why, and the daemon exits cleanly well within the 10 s a body may take.
func TestControlHalfSentBodyDoesNotHoldShutdown(t *testing.T) {
	// Serial: it bounds the shutdown's time (under 8 s).
	_, d := setup(t, itest.DaemonOptions{})
	c, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}.Request()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "POST /NetworkDriver.CreateNetwork HTTP/1.1\r\nHost: underlay\r\nContent-Length: %d\r\n\r\n%s", len(raw), raw[:len(raw)/2]); err != nil {
		t.Fatal(err)
	}
	// A request being answered meanwhile is not held up by it.
	if code, _, err := d.Post("/Plugin.Activate", nil); err != nil || code != http.StatusOK {
		t.Fatalf("Plugin.Activate beside the half-sent request: %d %v", code, err)
	}
	time.Sleep(500 * time.Millisecond) // the daemon is reading the body

	start := time.Now()
	if err := syscall.Kill(d.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Exited():
	case <-time.After(25 * time.Second):
		t.Fatalf("underlay did not exit within 25 s of SIGTERM with a half-sent body open")
	}
	took := time.Since(start)
	if !d.ProcessState().Success() {
		t.Fatalf("underlay exited with %v", d.ProcessState())
	}
	// Without the grace the shutdown waits for the 10 s body timeout (or,
	// before it, the 30 s shutdown timeout); a clean stop takes well under
	// a second, a loaded machine's a few.
	if took > 8*time.Second {
		t.Errorf("underlay took %s to exit after SIGTERM, want it not to wait for the half-sent body", took)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the half-sent request got no answer: %v", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "underlay is stopping and the request body was not complete") {
		t.Errorf("the half-sent request: %d %s, want 400 saying underlay is stopping", resp.StatusCode, msg)
	}
	if log := d.Log(); strings.Contains(log, "requests still running at shutdown") || !strings.Contains(log, "stopped") {
		t.Errorf("shutdown log:\n%s", log)
	}
	t.Logf("exited %s after SIGTERM", took.Round(time.Millisecond))
}

// TestControlAPIMethods: the control API answers POST only; any other
// method gets 405 with Allow: POST and a JSON error, and nothing is
// carried out or counted.
func TestControlAPIMethods(t *testing.T) {
	t.Parallel()
	_, d := setup(t, itest.DaemonOptions{})
	for _, path := range []string{control.PathState, control.PathRepair} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, "PATCH"} {
			resp := rawRequest(t, d.Socket, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: underlay\r\nContent-Length: 2\r\n\r\n{}", m, path))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Err string }
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Err, "use POST") {
				t.Errorf("%s %s: %d Allow %q %s, want 405 Allow POST with a JSON error", m, path, resp.StatusCode, resp.Header.Get("Allow"), b)
			}
		}
	}
	if code, body, err := d.Post(control.PathState, "{}"); err != nil || code != http.StatusOK {
		t.Fatalf("POST %s: %d %s %v", control.PathState, code, body, err)
	}
	_, metrics, err := d.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	got, err := itest.Metrics(string(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if n := got[`underlay_requests_total{outcome="ok",route="underlay/v1/state"}`]; n != 1 {
		t.Errorf("state requests counted %v, want the one POST", n)
	}
	for series := range got {
		if strings.Contains(series, "underlay/v1/repair") {
			t.Errorf("a refused method reached the repair route: %s", series)
		}
	}
}

// TestControlWrongSocketOrDockerHost: `ls` and `doctor` pointed at
// Docker's API socket say it is not underlay's socket (naming it and what
// answered), not that underlay is older than the command; a
// --docker-host without an address is refused by serve, ls and doctor,
// naming the value and the fix.
func TestControlWrongSocketOrDockerHost(t *testing.T) {
	t.Parallel()
	itest.RequireRoot(t)
	docker := itest.NewFakeDocker(t)
	dockerSock := strings.TrimPrefix(docker.Host(), "unix://")
	for _, cmd := range []string{"ls", "doctor"} {
		out, errOut, code := cli(t, cmd, "--socket", dockerSock, "--docker-host", docker.Host())
		if code != control.ExitCannot || !strings.Contains(errOut, dockerSock+" is not underlay's socket") || !strings.Contains(errOut, "Docker Engine API") ||
			!strings.Contains(errOut, "--socket") || strings.Contains(errOut, "older") {
			t.Errorf("underlay %s --socket <Docker's socket>: exit %d\n%s%s", cmd, code, out, errOut)
		}
		for _, bad := range []string{"unix://", "tcp://"} {
			_, errOut, code := cli(t, cmd, "--socket", dockerSock, "--docker-host", bad)
			if code != control.ExitCannot || !strings.Contains(errOut, `"`+bad+`"`) || !strings.Contains(errOut, "use ") {
				t.Errorf("underlay %s --docker-host %s: exit %d: %s", cmd, bad, code, errOut)
			}
		}
	}
	dir := t.TempDir()
	for bad, fix := range map[string]string{"unix://": "unix:///var/run/docker.sock", "tcp://": "tcp://HOST:PORT"} {
		_, errOut, code := cli(t, "serve", "--socket", filepath.Join(dir, "u.sock"), "--state", filepath.Join(dir, "u.db"), "--docker-host", bad)
		if code != 2 || !strings.Contains(errOut, `"`+bad+`"`) || !strings.Contains(errOut, fix) {
			t.Errorf("underlay serve --docker-host %s: exit %d: %s", bad, code, errOut)
		}
	}
}
