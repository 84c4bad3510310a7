package ipam

import (
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
)

// rolledBack counts ReservationRolledBack calls by kind.
type rolledBack struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rolledBack) ReservationRolledBack(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[kind]++
}

func (r *rolledBack) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[kind]
}

func TestExpiredReservationsAreReported(t *testing.T) {
	ev := &rolledBack{n: map[string]int{}}
	e := newEnv(t, nil, func(c *Config) { c.Events = ev })
	a := e.auto(t)
	e.auto(t)
	if n := ev.count("ipam"); n != 0 {
		t.Fatalf("%d rollbacks reported before any reservation expired", n)
	}
	e.clock.Advance(time.Minute)
	// The next pick purges both expired reservations.
	e.auto(t)
	if n := ev.count("ipam"); n != 2 {
		t.Fatalf("%d rollbacks reported, want 2", n)
	}
	// A purge in a request that is refused is undone with it: not reported.
	held := e.pool(t, "", "10.9.0.0/24", "", nil, false) // explicit: never expires
	e.clock.Advance(time.Minute)                         // the third auto pool expires
	_, err := e.m.RequestPool(ctx, "", held.Prefix, "", nil, false)
	wantErr(t, err, pluginapi.ErrConflict, held.Prefix)
	if n := ev.count("ipam"); n != 2 {
		t.Fatalf("%d rollbacks reported after a refused request, want 2", n)
	}
	if _, err := e.m.RequestPool(ctx, "", a.Prefix, "", nil, false); err != nil {
		t.Fatalf("explicit pool over an expired reservation: %v", err)
	}
	if n := ev.count("ipam"); n != 3 || len(ev.n) != 1 {
		t.Fatalf("rollbacks %v, want ipam=3", ev.n)
	}
}
