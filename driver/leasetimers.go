package driver

import (
	"context"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/store"
)

// Lease renewal: every DHCP lease is renewed at T1 and rebound at T2 for
// as long as its endpoint exists, across restarts (the times are in the
// endpoint's record). A lease that expires or that the server refuses is
// lost (lostlease.go): logged at ERROR once, its address blocked, and only
// that address asked for again.

// nextLeaseAction is when to act on a lease next: the dhcp package's plan
// (T1, then retries at half the time left to T2 and to the expiry, at
// least dhcp.MinRetry apart), and every lostLeaseRetry once it is lost
// (the same address is asked for again).
func nextLeaseAction(l store.Lease, now time.Time) time.Time {
	if !l.Lost.IsZero() {
		return now.Add(lostLeaseRetry)
	}
	t1, t2, lt := l.Durations()
	p := dhcp.Plan(dhcp.Lease{Acquired: l.Acquired, T1: t1, T2: t2, LeaseTime: lt}, now)
	if p.Phase == dhcp.Expired {
		return now.Add(dhcp.MinRetryShort) // renewLease marks it lost; never a hot loop
	}
	return p.Next
}

const lostLeaseRetry = 30 * time.Second

type leaseKey struct{ network, endpoint string }

// leaseTimers are the due times of the leases this daemon renews. A key
// handed out by next is in flight until its renewal sets or drops it.
type leaseTimers struct {
	mu       sync.Mutex
	due      map[leaseKey]time.Time
	inFlight map[leaseKey]bool
	wake     chan struct{}
	// cancels end the exchanges with a server under way, by lease;
	// dropped are the leases whose endpoint is being deleted.
	cancels map[leaseKey]context.CancelFunc
	dropped map[leaseKey]bool
	// running counts the renewal loop and its renewals; Close waits.
	running sync.WaitGroup
}

func newLeaseTimers() *leaseTimers {
	return &leaseTimers{due: map[leaseKey]time.Time{}, inFlight: map[leaseKey]bool{}, wake: make(chan struct{}, 1),
		cancels: map[leaseKey]context.CancelFunc{}, dropped: map[leaseKey]bool{}}
}

// exchange registers the cancel of a lease's exchange with its server;
// false when the lease was dropped since it was taken (do not start).
func (t *leaseTimers) exchange(k leaseKey, cancel context.CancelFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped[k] {
		delete(t.dropped, k)
		return false
	}
	t.cancels[k] = cancel
	return true
}

// exchanged ends what exchange began.
func (t *leaseTimers) exchanged(k leaseKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cancels, k)
	delete(t.dropped, k)
}

// set schedules a lease (again), ending its flight.
func (t *leaseTimers) set(k leaseKey, at time.Time) {
	t.mu.Lock()
	t.due[k] = at
	delete(t.inFlight, k)
	delete(t.dropped, k)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// drop forgets a lease and cancels its exchange under way, if any: an
// endpoint being deleted does not wait for a silent server.
func (t *leaseTimers) drop(k leaseKey) {
	t.mu.Lock()
	delete(t.due, k)
	if t.inFlight[k] {
		if cancel, ok := t.cancels[k]; ok {
			cancel()
		} else {
			t.dropped[k] = true
		}
	}
	delete(t.inFlight, k)
	t.mu.Unlock()
}

// next takes the leases due at now (they are in flight from then on) and
// returns the earliest later due time.
func (t *leaseTimers) next(now time.Time) (due []leaseKey, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, when := range t.due {
		if !when.After(now) {
			due = append(due, k)
			delete(t.due, k)
			t.inFlight[k] = true
		} else if at.IsZero() || when.Before(at) {
			at = when
		}
	}
	return due, at
}
