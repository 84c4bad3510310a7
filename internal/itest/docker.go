package itest

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// FakeDocker serves GET /networks/{id} of Docker's Engine API on a unix
// socket, answering as dockerd does: every answer carries the Api-Version
// header, 200 for the IDs Docker knows, and 404 with Docker's error body
// {"message": "..."} for the others. A Mode makes it answer as something
// that is not Docker, or not at all.
type FakeDocker struct {
	mu   sync.Mutex
	live map[string]bool
	// subnets are the IPAM subnets GET /networks lists for a network.
	subnets map[string][]string
	calls   int
	// answered counts, per network ID, the 200s and Docker 404s answered.
	found, notFound map[string]int
	delay           time.Duration
	mode            DockerMode
	path            string
	// stop is closed at cleanup: it releases hung and delayed answers.
	stop   chan struct{}
	timers []*time.Timer
}

// DockerMode is how the fake answers.
type DockerMode int

const (
	// DockerAPI answers as dockerd does (the default).
	DockerAPI DockerMode = iota
	// WebServer404 answers every request as a plain web server that knows
	// no such path: 404 "404 page not found" as text/plain, no Api-Version
	// (a DOCKER_HOST pointing at the wrong socket).
	WebServer404
	// NoAPIVersion404 answers 404 with Docker's JSON error body but without
	// the Api-Version header (a proxy imitating Docker's body).
	NoAPIVersion404
	// TextBody404 answers 404 with the Api-Version header but a text body
	// that is not Docker's JSON error.
	TextBody404
	// Hung accepts every request and never answers it, until the asker
	// gives up or the test ends (a dockerd stuck on a lock).
	Hung
)

// APIVersion is the Engine API version the fake claims.
const APIVersion = "1.41"

// NewFakeDocker starts the fake API; it stops at cleanup, releasing every
// request it holds.
func NewFakeDocker(t testing.TB) *FakeDocker {
	t.Helper()
	f := &FakeDocker{live: map[string]bool{}, found: map[string]int{}, notFound: map[string]int{}, path: filepath.Join(t.TempDir(), "docker.sock"), stop: make(chan struct{})}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(f.serve)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		f.mu.Lock()
		for _, tm := range f.timers {
			tm.Stop()
		}
		f.mu.Unlock()
		close(f.stop)
		_ = srv.Close()
	})
	return f
}

func (f *FakeDocker) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls++
	delay, mode := f.delay, f.mode
	f.mu.Unlock()
	if mode == Hung {
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-f.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
	f.mu.Lock()
	mode = f.mode // the test may have switched it during the delay
	if r.URL.Path == "/networks" && r.Method == http.MethodGet && mode == DockerAPI {
		list := f.list()
		f.mu.Unlock()
		w.Header().Set("Api-Version", APIVersion)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/networks/")
	live := ok && r.Method == http.MethodGet && f.live[id]
	if ok && mode == DockerAPI {
		if live {
			f.found[id]++
		} else {
			f.notFound[id]++
		}
	}
	f.mu.Unlock()
	switch mode {
	case WebServer404:
		http.NotFound(w, r) // text/plain "404 page not found", as net/http's mux
		return
	case NoAPIVersion404:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"network ` + id + ` not found"}`))
		return
	case TextBody404:
		w.Header().Set("Api-Version", APIVersion)
		http.Error(w, "network "+id+" not found", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Api-Version", APIVersion)
	h.Set("Server", "Docker/20.10.0 (linux)")
	h.Set("Ostype", "linux")
	h.Set("Content-Type", "application/json")
	switch {
	case !ok || r.Method != http.MethodGet:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"page not found"}`))
	case live:
		_, _ = w.Write([]byte(`{"Id":"` + id + `"}`))
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"network ` + id + ` not found"}`))
	}
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

// Learn adds networks Docker knows.
func (f *FakeDocker) Learn(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.live[id] = true
	}
}

// LearnAfter makes Docker know the network after d, as libnetwork stores
// a network only after the driver answered its CreateNetwork: call it when
// the driver answered {}.
func (f *FakeDocker) LearnAfter(id string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timers = append(f.timers, time.AfterFunc(d, func() { f.Learn(id) }))
}

// Knows reports whether Docker knows the network now.
func (f *FakeDocker) Knows(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live[id]
}

// SetMode sets how the fake answers from now on.
func (f *FakeDocker) SetMode(m DockerMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
}

// SetDelay makes every answer wait (a slow dockerd).
func (f *FakeDocker) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Answers returns how many times the fake, answering as Docker, said it
// knows the network (200) and that it does not (Docker's 404).
func (f *FakeDocker) Answers(id string) (found, notFound int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.found[id], f.notFound[id]
}

// Calls returns how many requests the fake received (answered or not).
func (f *FakeDocker) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// SetSubnets sets the subnets GET /networks lists for a network.
func (f *FakeDocker) SetSubnets(id string, subnets ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subnets == nil {
		f.subnets = map[string][]string{}
	}
	f.subnets[id] = subnets
}

// list answers GET /networks: the live networks, named "net-" and the
// first 12 characters of the ID, with their subnets. f.mu is held.
func (f *FakeDocker) list() []map[string]any {
	out := []map[string]any{}
	for id, live := range f.live {
		if !live {
			continue
		}
		var config []map[string]string
		for _, s := range f.subnets[id] {
			config = append(config, map[string]string{"Subnet": s})
		}
		name := id
		if len(name) > 12 {
			name = name[:12]
		}
		out = append(out, map[string]any{"Id": id, "Name": "net-" + name, "Driver": "underlay", "IPAM": map[string]any{"Config": config}})
	}
	return out
}
