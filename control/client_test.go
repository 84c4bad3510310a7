package control

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/pluginapi"
)

// serveUnix serves h on a new unix socket and returns its path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// dockerLike answers as dockerd does for a path it does not know.
func dockerLike(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Api-Version", "1.47")
	h.Set("Server", "Docker/27.5.1 (linux)")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(`{"message":"page not found"}` + "\n"))
}

const htmlPage = `<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx/1.27.0</center>
` + "<!-- padding padding padding padding padding padding padding padding padding padding padding padding padding -->" + `
</body>
</html>
`

// TestClientAnswersThatAreNotUnderlays: the client says what answered
// and what to do, in one short line, for a socket that is not underlay's
// (Docker's API), an answer that is not JSON (an HTML error page), and an
// underlay that is older than the command.
func TestClientAnswersThatAreNotUnderlays(t *testing.T) {
	for _, c := range []struct {
		name    string
		h       http.HandlerFunc
		want    []string
		notWant []string
	}{
		{name: "Docker's API socket", h: dockerLike,
			want:    []string{"is not underlay's socket", "Docker Engine API", "Api-Version 1.47", "Docker/27.5.1", "404 Not Found", "page not found", "--socket", DefaultSocket},
			notWant: []string{"older"}},
		{name: "a web server's 404", h: http.NotFound,
			want:    []string{"is not underlay's socket", "404 Not Found", "text/plain", "404 page not found", "--socket"},
			notWant: []string{"older", "Docker"}},
		{name: "an HTML error page", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(htmlPage))
		}, want: []string{"502 Bad Gateway", "text/html", `"<html>"`, "not underlay's JSON error", "--socket"},
			notWant: []string{"<title>", "nginx", "padding"}},
		{name: "a 200 that is not JSON", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(htmlPage))
		}, want: []string{"is not underlay's", "200 OK", "text/html", `"<html>"`, "--socket"},
			notWant: []string{"nginx"}},
		{name: "an older underlay", h: func(w http.ResponseWriter, r *http.Request) {
			pluginapi.WriteJSON(w, http.StatusNotFound, pluginapi.ErrorResponse{Err: "underlay does not implement " + r.URL.Path})
		}, want: []string{"does not know " + PathState, "older than this command", "same version"},
			notWant: []string{"not underlay's socket"}},
		{name: "underlay's own refusal", h: func(w http.ResponseWriter, r *http.Request) {
			pluginapi.WriteJSON(w, http.StatusConflict, pluginapi.ErrorResponse{Err: "conflict: not released"})
		}, want: []string{"the daemon refused: conflict: not released"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock := serveUnix(t, c.h)
			_, err := NewClient(sock).State(context.Background())
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, sock) && c.name != "underlay's own refusal" {
				t.Errorf("%q does not name the socket %s", msg, sock)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("%q says %q", msg, w)
				}
			}
			if len(msg) > 600 {
				t.Errorf("%d characters: %q", len(msg), msg)
			}
		})
	}
}

func TestSummaryCutsTheFirstLine(t *testing.T) {
	resp := &http.Response{StatusCode: 500, Status: "500 Internal Server Error", Header: http.Header{"Content-Type": {"text/plain"}}}
	got := summary(resp, []byte("\n\n  "+strings.Repeat("é", 200)+"\nsecond line"))
	if want := `status 500 Internal Server Error, text/plain: "` + strings.Repeat("é", summaryLen) + `..."`; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got := summary(&http.Response{StatusCode: 503}, nil); got != "status 503 Service Unavailable, empty body" {
		t.Errorf("summary of an empty answer: %q", got)
	}
}

// TestControlAPIOnlyPOST: the control API's paths answer other methods
// 405 with Allow: POST and a JSON error naming the method, before any
// handler runs.
func TestControlAPIOnlyPOST(t *testing.T) {
	mux := pluginapi.NewMux("NetworkDriver")
	(&Server{Log: slog.New(slog.DiscardHandler)}).Register(mux)
	for _, path := range []string{PathState, PathRepair} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead, "BREW"} {
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(m, path, strings.NewReader("{}")))
			if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("%s %s: %d Allow %q, want 405 Allow POST", m, path, w.Code, w.Header().Get("Allow"))
			}
			var e pluginapi.ErrorResponse
			if m != http.MethodHead && (json.Unmarshal(w.Body.Bytes(), &e) != nil || !strings.Contains(e.Err, m+" "+path) || !strings.Contains(e.Err, "use POST")) {
				t.Errorf("%s %s: body %q", m, path, w.Body)
			}
		}
	}
	// POST reaches the route (here: a repair the request does not name).
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, PathRepair, strings.NewReader(`{"Op":"recreate-parent"}`)))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "needs Link") {
		t.Errorf("POST %s: %d %s", PathRepair, w.Code, w.Body)
	}
}

func TestCheckDockerHost(t *testing.T) {
	for _, ok := range []string{"unix:///var/run/docker.sock", "unix:///run/user/1000/docker.sock", "tcp://127.0.0.1:2375", "tcp://[::1]:2376", "tcp://docker.lan:2375/"} {
		if err := CheckDockerHost(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"unix://":                    "has no socket path: use unix:///var/run/docker.sock",
		"unix://var/run/docker.sock": "is not absolute: use unix:///var/run/docker.sock",
		"tcp://":                     "has no address: use tcp://HOST:PORT",
		"tcp:///":                    "has no address",
		"tcp://127.0.0.1":            "is not HOST:PORT",
		"tcp://:2375":                "is not HOST:PORT",
		"tcp://host:http":            "is not a TCP port",
		"tcp://host:0":               "is not a TCP port",
		"/var/run/docker.sock":       "use unix:///path/to/docker.sock",
		"":                           "use unix:///path/to/docker.sock",
		"ssh://me@host":              "is not valid",
	} {
		err := CheckDockerHost(bad)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("%q: %v, want an error naming it and saying %q", bad, err, want)
		}
	}
}

// TestDoctorExitCodes: with Docker unreachable, doctor's checks that need
// it are skipped: that is exit 3 (ExitIncomplete), naming the checks and
// why, never "healthy" and exit 0; with Docker answering, the same daemon
// is healthy (exit 0). In JSON too.
func TestDoctorExitCodes(t *testing.T) {
	daemon := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pluginapi.WriteJSON(w, http.StatusOK, State{Version: "test"})
	}))
	docker := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.47")
		_, _ = w.Write([]byte("[]"))
	}))
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := RunDoctor(append([]string{"--socket", daemon}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	out, errOut, code := run("--docker-host", "unix:///nonexistent/docker.sock")
	if code != ExitIncomplete || code == ExitHealthy || strings.Contains(out, "healthy") {
		t.Errorf("Docker unreachable: exit %d, want %d\n%s%s", code, ExitIncomplete, out, errOut)
	}
	for _, want := range []string{"stale-network check skipped", "unused-pool check skipped", "Docker could not be asked", "/nonexistent/docker.sock"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "incomplete") || !strings.Contains(out, "stale-network and unused-pool checks were skipped") {
		t.Errorf("stdout does not say the report is incomplete:\n%s", out)
	}
	out, _, code = run("--docker-host", "unix:///nonexistent/docker.sock", "--json")
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != ExitIncomplete || r.Complete || len(r.Skipped) != 2 || r.Skipped[0].Check != "stale-network" ||
		!strings.Contains(r.Skipped[0].Reason, "/nonexistent/docker.sock") || len(r.Warnings) != 2 {
		t.Errorf("--json with Docker unreachable: exit %d, %+v, %v\n%s", code, r, err, out)
	}
	out, errOut, code = run("--docker-host", "unix://"+docker)
	if code != ExitHealthy || !strings.Contains(out, "healthy: nothing found") || errOut != "" {
		t.Errorf("Docker answering: exit %d, want 0\n%s%s", code, out, errOut)
	}
	out, _, code = run("--docker-host", "unix://"+docker, "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != ExitHealthy || !r.Complete || r.Skipped == nil || len(r.Skipped) != 0 {
		t.Errorf("--json with Docker answering: exit %d, %+v, %v\n%s", code, r, err, out)
	}
	for _, bad := range []string{"unix://", "tcp://"} {
		if _, errOut, code := run("--docker-host", bad); code != ExitCannot || !strings.Contains(errOut, `"`+bad+`"`) {
			t.Errorf("--docker-host %s: exit %d: %s", bad, code, errOut)
		}
	}
}
