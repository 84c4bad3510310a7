package leases

import (
	"context"
	"sync"
	"time"
)

// Lease renewal: every lease, DHCP or DHCPv6, is renewed at T1 and
// rebound at T2 for as long as its endpoint exists, across restarts (the
// times are in the endpoint's record). A lease that expires or that the
// server refuses is lost (lost.go): logged at ERROR once, its address
// blocked, and only that address asked for again.

// Key names an endpoint's lease.
type Key struct{ Network, Endpoint string }

// Timers are the due times of the leases this daemon renews. A key
// handed out by next is in flight until its renewal sets or drops it.
type Timers struct {
	mu       sync.Mutex
	due      map[Key]time.Time
	inFlight map[Key]bool
	wake     chan struct{}
	// cancels end the exchanges with a server under way, by lease;
	// dropped are the leases whose endpoint is being deleted.
	cancels map[Key]context.CancelFunc
	dropped map[Key]bool
	// running counts the renewal loop and its renewals; Close waits.
	running sync.WaitGroup
}

// NewTimers returns timers with nothing scheduled.
func NewTimers() *Timers {
	return &Timers{due: map[Key]time.Time{}, inFlight: map[Key]bool{}, wake: make(chan struct{}, 1),
		cancels: map[Key]context.CancelFunc{}, dropped: map[Key]bool{}}
}

// Exchange registers the cancel of a lease's exchange with its server;
// false when the lease was dropped since it was taken (do not start).
func (t *Timers) Exchange(k Key, cancel context.CancelFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped[k] {
		delete(t.dropped, k)
		return false
	}
	t.cancels[k] = cancel
	return true
}

// Exchanged ends what Exchange began.
func (t *Timers) Exchanged(k Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cancels, k)
	delete(t.dropped, k)
}

// Set schedules a lease (again), ending its flight.
func (t *Timers) Set(k Key, at time.Time) {
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

// Drop forgets a lease and cancels its exchange under way, if any: an
// endpoint being deleted does not wait for a silent server.
func (t *Timers) Drop(k Key) {
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

// Next takes the leases due at now (they are in flight from then on) and
// returns the earliest later due time.
func (t *Timers) Next(now time.Time) (due []Key, at time.Time) {
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

// Due is when a lease is due, false when it is not scheduled (in flight,
// dropped, or never set).
func (t *Timers) Due(k Key) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.due[k]
	return at, ok
}

// Scheduled counts the leases with a due time.
func (t *Timers) Scheduled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.due)
}

// Go runs f as one of the timers' goroutines (Wait waits for it).
func (t *Timers) Go(f func()) {
	t.running.Add(1)
	go func() {
		defer t.running.Done()
		f()
	}()
}

// Wait waits for the loop and the renewals Go started.
func (t *Timers) Wait() { t.running.Wait() }

// Loop calls renew for each lease when it falls due, at most maxRenewals
// at once, until ctx ends or stop closes; it returns at once, the loop
// runs as one of the timers' goroutines. renew must schedule the lease
// again (Set) or leave it dropped.
func (t *Timers) Loop(ctx context.Context, stop <-chan struct{}, now func() time.Time, renew func(context.Context, Key)) {
	ctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, maxRenewals)
	t.Go(func() {
		defer cancel()
		for {
			due, at := t.Next(now())
			for _, k := range due {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				case <-stop:
					return
				}
				t.Go(func() {
					defer func() { <-sem }()
					renew(ctx, k)
				})
			}
			wait := maxLeaseSleep
			if !at.IsZero() {
				wait = min(at.Sub(now()), maxLeaseSleep)
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-stop:
				timer.Stop()
				return
			case <-t.wake:
			case <-timer.C:
			}
			timer.Stop()
		}
	})
}
