package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dockerapi"
)

// fakeLister is Docker's GET /networks as the background list calls it.
type fakeLister struct {
	mu    sync.Mutex
	nets  []dockerapi.Network
	err   error
	calls int
	// called receives after each call, without blocking.
	called chan struct{}
}

func (f *fakeLister) list(context.Context) ([]dockerapi.Network, error) {
	f.mu.Lock()
	f.calls++
	nets, err := slices.Clone(f.nets), f.err
	f.mu.Unlock()
	select {
	case f.called <- struct{}{}:
	default:
	}
	return nets, err
}

func (f *fakeLister) set(err error, nets ...dockerapi.Network) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nets, f.err = nets, err
}

func (f *fakeLister) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// safeBuffer is a log sink the list's goroutine and the test share.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond for up to 10 s (a loaded machine is slow, never this
// slow).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
	}
}

func TestDockerSubnetsListedInTheBackgroundOnceWanted(t *testing.T) {
	f := &fakeLister{called: make(chan struct{}, 1)}
	f.set(nil,
		dockerapi.Network{ID: "a", Driver: "macvlan", Subnets: []string{"172.16.0.77/24", "fd00:1::/64"}},
		dockerapi.Network{ID: "b", Driver: "bridge", Subnets: []string{"172.17.0.0/16", "not-a-subnet"}},
		dockerapi.Network{ID: "c", Driver: "underlay", Subnets: []string{"172.16.0.0/24"}},
		dockerapi.Network{ID: "d", Driver: "null"})
	var logs safeBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := newDockerSubnets(f.list, time.Millisecond, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	go func() { s.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// Not in use: Docker is never asked.
	time.Sleep(50 * time.Millisecond)
	if n := f.count(); n != 0 || len(known(s)) != 0 {
		t.Fatalf("before the IPAM was used: %d listings, subnets %v; want none", n, known(s))
	}

	s.Wanted()
	s.Wanted() // a second use changes nothing
	want := []netip.Prefix{netip.MustParsePrefix("172.16.0.0/24"), netip.MustParsePrefix("172.17.0.0/16"), netip.MustParsePrefix("fd00:1::/64")}
	waitFor(t, "Docker's subnets listed", func() bool { return slices.Equal(known(s), want) })

	// Listed again and again: a network Docker makes later is seen.
	f.set(nil, dockerapi.Network{ID: "e", Subnets: []string{"10.1.0.0/16"}})
	waitFor(t, "a later network's subnet listed", func() bool {
		return slices.Equal(known(s), []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")})
	})

	// Docker unreachable: the last list stays, and it is logged once.
	f.set(errors.New("dial unix /var/run/docker.sock: connect: no such file or directory"))
	calls := f.count()
	waitFor(t, "listings while Docker is unreachable", func() bool { return f.count() > calls+5 })
	if got := known(s); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Fatalf("while Docker is unreachable the list is %v, want the last one kept", got)
	}
	if n := strings.Count(logs.String(), "cannot list Docker's networks"); n != 1 {
		t.Fatalf("%d warnings for one outage, want 1:\n%s", n, logs.String())
	}
	f.set(nil)
	waitFor(t, "an empty list after Docker answers again", func() bool { return len(known(s)) == 0 })
	waitFor(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "Docker's networks listed again") })

	// Stopped with its context.
	cancel()
	<-done
	calls = f.count()
	time.Sleep(20 * time.Millisecond)
	if n := f.count(); n != calls {
		t.Fatalf("%d listings after the context ended", n-calls)
	}
}

// Docker hung (dockerd starting, its API not answering): the list is
// still answered at once.
func TestDockerSubnetsNeverWaitForDocker(t *testing.T) {
	hung := make(chan struct{})
	entered := make(chan struct{}, 1)
	list := func(ctx context.Context) ([]dockerapi.Network, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-hung:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startDockerSubnets(ctx, list, slog.New(slog.DiscardHandler))
	s.Wanted()
	<-entered
	answered := make(chan []netip.Prefix, 1)
	go func() { answered <- known(s) }()
	select {
	case got := <-answered:
		if len(got) != 0 {
			t.Fatalf("subnets %v before any listing", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KnownSubnets waited for a hung Docker")
	}
	close(hung)
}

// known is the list without its time.
func known(s *dockerSubnets) []netip.Prefix {
	p, _ := s.KnownSubnets()
	return p
}
