package itest

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// FakeDocker serves GET /networks/{id} of Docker's Engine API on a unix
// socket: 200 for the IDs set live, 404 for the others.
type FakeDocker struct {
	mu    sync.Mutex
	live  map[string]bool
	calls int
	delay time.Duration
	path  string
}

// NewFakeDocker starts the fake API; it stops at cleanup.
func NewFakeDocker(t testing.TB) *FakeDocker {
	t.Helper()
	f := &FakeDocker{live: map[string]bool{}, path: filepath.Join(t.TempDir(), "docker.sock")}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		delay := f.delay
		f.mu.Unlock()
		time.Sleep(delay)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls++
		id, ok := strings.CutPrefix(r.URL.Path, "/networks/")
		if !ok || r.Method != http.MethodGet {
			http.Error(w, `{"message":"page not found"}`, http.StatusNotFound)
			return
		}
		if f.live[id] {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"Id":"` + id + `"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"network ` + id + ` not found"}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// Host is the DOCKER_HOST of the fake.
func (f *FakeDocker) Host() string { return "unix://" + f.path }

// SetLive sets the networks Docker knows.
func (f *FakeDocker) SetLive(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = map[string]bool{}
	for _, id := range ids {
		f.live[id] = true
	}
}

// SetDelay makes every answer wait (a slow dockerd).
func (f *FakeDocker) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Calls returns how many requests the fake answered.
func (f *FakeDocker) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}
