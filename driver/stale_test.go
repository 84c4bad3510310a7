package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
)

// libnetwork stores a network only after the driver answered: a holder
// created a moment ago is unknown to Docker. Its 404 is not believed until
// the holder is as old as the grace period; then Docker knows it.
func TestStaleYoungHolderIsAskedAgainAfterTheGrace(t *testing.T) {
	f := newFixture(t)
	f.grace = 100 * time.Millisecond
	f.close()
	f.open()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "macvlan_mode": "passthru"}})
	f.docker.setLive() // not stored by Docker yet...
	f.docker.answer = func(context.Context, string) (bool, error) {
		f.docker.mu.Lock()
		defer f.docker.mu.Unlock()
		return f.docker.calls > 1, nil // ...by the second question it is
	}
	wantErr(t, f.create(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.2.0/24"}}), pluginapi.ErrConflict, "aaaaaaaaaaaa", "docker network rm aaaaaaaaaaaa")
	f.wantNetworks(netA)
	if f.docker.calls != 2 {
		t.Fatalf("Docker asked %d times, want twice (once, then after the grace period)", f.docker.calls)
	}
}

func TestStaleOldHolderIsAskedOnce(t *testing.T) {
	f := newFixture(t)
	f.grace = time.Hour // a wait would hang the test
	f.close()
	f.open()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "macvlan_mode": "passthru"}})
	f.clock.Advance(2 * time.Hour)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.2.0/24"}})
	f.wantNetworks(netB)
	if f.docker.calls != 1 {
		t.Fatalf("Docker asked %d times, want once", f.docker.calls)
	}
}

// All holders are asked at once, and the first unanswerable one ends the
// check: with a hung Docker the wait is one lookup, not one per holder.
func TestStaleHoldersAreAskedConcurrently(t *testing.T) {
	f := newFixture(t)
	const holders = 10
	for i := 0; i < holders; i++ {
		f.mustCreate(netReq{ID: fmt.Sprintf("%012x", i+1), Opts: map[string]string{"parent": "eth0"}, V4: []string{fmt.Sprintf("198.18.%d.0/24", i+1)}})
	}
	var mu sync.Mutex
	inflight, most := 0, 0
	all := make(chan struct{})
	f.docker.answer = func(context.Context, string) (bool, error) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == holders {
			close(all)
		}
		mu.Unlock()
		select { // a hung Docker: the lookup times out
		case <-all:
		case <-time.After(5 * time.Second):
		}
		return false, errors.New("context deadline exceeded")
	}
	err := f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "macvlan_mode": "passthru"}})
	wantErr(t, err, pluginapi.ErrConflict, "10 networks", "and 5 more", "docker network rm 000000000001", "could not be asked", "DOCKER_HOST")
	if most != holders {
		t.Fatalf("at most %d holders were asked at once, want all %d", most, holders)
	}
	if len(f.networks()) != holders {
		t.Fatalf("a refusal changed the state: %v", f.networks())
	}
}
