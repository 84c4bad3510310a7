package pluginapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an Observer keeping every observation.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) ObserveRequest(route, outcome string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d <= 0 {
		outcome += " (no duration)"
	}
	r.got = append(r.got, route+" "+outcome)
}

type idReq struct{ NetworkID string }

func TestOutcome(t *testing.T) {
	for status, want := range map[int]string{200: "ok", 400: "invalid", 413: "invalid", 409: "conflict", 500: "error", 404: "error", 502: "error"} {
		if got := Outcome(status); got != want {
			t.Errorf("Outcome(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestRouteReportsOutcomes: every answer of a Route is observed once with
// the outcome of its status, and nothing else on the mux is.
func TestRouteReportsOutcomes(t *testing.T) {
	mux := NewMux("NetworkDriver")
	log := slog.New(slog.DiscardHandler)
	Route(mux, log, "/NetworkDriver.Do", func(_ context.Context, r *idReq) (any, error) {
		time.Sleep(time.Millisecond) // a duration the clock cannot miss
		switch r.NetworkID {
		case "invalid":
			return nil, Invalidf("bad option")
		case "conflict":
			return nil, fmt.Errorf("%w: parent taken", ErrConflict)
		case "unknown":
			return nil, fmt.Errorf("%w: network x", ErrNotFound)
		case "fail":
			return nil, errors.New("disk full")
		case "panic":
			panic("boom")
		}
		return nil, nil
	})
	rec := &recorder{}
	h := Observe(mux, rec)
	post := func(path, body string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		return w.Code
	}
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{"NetworkID":"ok"}`, 200},
		{`{"NetworkID":"invalid"}`, 400},
		{`{"NetworkID":"conflict"}`, 409},
		{`{"NetworkID":"unknown"}`, 500},
		{`{"NetworkID":"fail"}`, 500},
		{`{"NetworkID":"panic"}`, 500},
		{`{not json`, 400},
		{`{"NetworkID":"` + strings.Repeat("x", MaxBody) + `"}`, 413},
	} {
		if got := post("/NetworkDriver.Do", c.body); got != c.status {
			t.Errorf("%.40s: status %d, want %d", c.body, got, c.status)
		}
	}
	// Not routes: never observed.
	post("/Plugin.Activate", "")
	post("/NetworkDriver.Nope", "{}")

	want := []string{"ok", "invalid", "conflict", "error", "error", "error", "invalid", "invalid"}
	if len(rec.got) != len(want) {
		t.Fatalf("observed %q, want %d requests", rec.got, len(want))
	}
	for i, o := range want {
		if rec.got[i] != "NetworkDriver.Do "+o {
			t.Errorf("observation %d = %q, want %q", i, rec.got[i], "NetworkDriver.Do "+o)
		}
	}
}

// TestRouteWithoutObserver: a mux nobody wrapped answers as before.
func TestRouteWithoutObserver(t *testing.T) {
	mux := NewMux("IpamDriver")
	Route(mux, slog.New(slog.DiscardHandler), "/IpamDriver.Do", func(context.Context, *struct{}) (any, error) { return nil, nil })
	if h := Observe(mux, nil); h != http.Handler(mux) {
		t.Fatal("Observe with a nil observer wrapped the handler")
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/IpamDriver.Do", nil))
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != "{}" {
		t.Fatalf("answer %d %q", w.Code, w.Body)
	}
}
