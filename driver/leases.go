package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/driver/internal/rules"
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

const (
	// maxRenewals bounds the renewals in flight at once: one silent LAN
	// (each renewal waits up to dhcp_timeout) must not hold up the others.
	maxRenewals = 32
	// maxLeaseSleep caps the loop's sleep: timers stop while the host is
	// suspended, the server's clock does not; re-planning from the wall
	// clock every minute bounds how late a renewal can be.
	maxLeaseSleep = time.Minute
)

// RunLeases loads every lease from the state file and renews each when due,
// at most maxRenewals at once, until ctx ends or the driver closes. Call it
// after Restore.
func (d *Driver) RunLeases(ctx context.Context) error {
	now := d.now()
	var lost []rules.BlockKey
	if err := d.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n store.Network) error {
			if !rules.DHCPOf(n).On {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				if ep.Lease == nil {
					continue
				}
				if !ep.Lease.Lost.IsZero() {
					lost = append(lost, rules.BlockKey{Parent: n.Parent, Addr: leaseAddr(*ep.Lease)})
				}
				// A renewal that fell due while the daemon was down is
				// sent now, not at the next retry time.
				at := now
				if now.Before(ep.Lease.T1) {
					at = ep.Lease.T1
				}
				d.leases.set(leaseKey{n.ID, ep.ID}, at)
			}
			return err
		})
	}); err != nil {
		return err
	}
	d.leases.running.Add(1)
	go func(ctx context.Context) { // not before serving: a RELEASE may wait on a parent
		defer d.leases.running.Done()
		d.releaseJournaled(ctx)
	}(ctx)
	if err := d.restoreBlocks(ctx, lost); err != nil {
		d.log.Error("could not block the addresses of lost DHCP leases again: their containers may send from addresses they do not hold", "error", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, maxRenewals)
	d.leases.running.Add(1)
	go func() {
		defer d.leases.running.Done()
		defer cancel()
		for {
			due, at := d.leases.next(d.now())
			for _, k := range due {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				case <-d.stop:
					return
				}
				d.leases.running.Add(1)
				go func() {
					defer d.leases.running.Done()
					defer func() { <-sem }()
					d.renewLease(ctx, k)
				}()
			}
			wait := maxLeaseSleep
			if !at.IsZero() {
				wait = min(at.Sub(d.now()), maxLeaseSleep)
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-d.stop:
				timer.Stop()
				return
			case <-d.leases.wake:
			case <-timer.C:
			}
			timer.Stop()
		}
	}()
	return nil
}

// renewLease renews one lease, marks it lost once it expired or the
// server refused it, and asks for a lost one's address again; then it
// schedules the next action. The endpoint's lock is held only to read the
// record and to commit the outcome, not across the exchange with the
// server: DeleteEndpoint does not wait for a silent LAN, it cancels the
// exchange (leaseTimers.cancel).
func (d *Driver) renewLease(ctx context.Context, k leaseKey) {
	n, ep, ok := d.leaseRecord(ctx, k)
	if !ok {
		return
	}
	old := *ep.Lease
	now := d.now()
	if old.Lost.IsZero() && now.Before(old.T1) {
		d.leases.set(k, old.T1)
		return
	}
	log := d.log.With("network", n.ID, "endpoint", ep.ID, "address", old.Addr)
	// A renewal waits no longer than dhcp_timeout, nor past the lease's
	// expiry (then it is lost, and that is acted on at once).
	deadline := now.Add(rules.DHCPOf(n).Timeout)
	if old.Lost.IsZero() && old.Expiry.After(now) && old.Expiry.Before(deadline) {
		deadline = old.Expiry
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if !d.leases.exchange(k, cancel) {
		return // the endpoint is being deleted
	}
	defer d.leases.exchanged(k)
	if old.Lost.IsZero() && !now.Before(old.Expiry) {
		// Expired: lost, whether or not the server can be asked now.
		if old, ok = d.loseLease(ctx, k, n, ep, old, "the lease expired without a renewal", log); !ok {
			return
		}
		ep.Lease = &old
	}
	r, err := d.leaseRequest(rctx, n, ep)
	var l store.Lease
	switch {
	case err != nil:
	case !old.Lost.IsZero():
		l, err = d.reacquire(rctx, r, old)
	default:
		l, err = d.dhcp.Renew(rctx, r, old)
		if errors.Is(err, ErrLeaseNAK) {
			if old, ok = d.loseLease(ctx, k, n, ep, old, "the server refused to renew it (DHCPNAK): "+err.Error(), log); !ok {
				return
			}
			ep.Lease = &old
			l, err = d.reacquire(rctx, r, old) // ask for it again at once
		}
	}
	if err != nil {
		next := nextLeaseAction(old, d.now()) // after the exchange, which took its time
		if old.Lost.IsZero() {
			log.Warn("could not renew DHCP lease; retrying", "t2", old.T2, "expiry", old.Expiry, "next", next, "error", err)
		} else {
			log.Debug("lost DHCP lease not won back yet; asking again", "next", next, "error", err)
		}
		d.leases.set(k, next)
		return
	}
	switch d.commitLease(ctx, k, old, l, log) {
	case leaseGone:
		// The endpoint went meanwhile: the lease this exchange extended or
		// won is not kept for anyone.
		_ = d.dhcp.Release(context.WithoutCancel(ctx), r, l)
		return
	case leaseNotRecorded:
		return // rescheduled: the record keeps the old lease, which the server extended
	}
	if !old.Lost.IsZero() {
		d.wonBack(context.WithoutCancel(ctx), n, ep, old)
	} else {
		log.Info("renewed DHCP lease", "expiry", l.Expiry, "t1", l.T1)
	}
	d.leases.set(k, nextLeaseAction(l, d.now()))
}

// loseLease records a lease lost, then blocks its address (only once the
// record says lost: a deletion in between leaves no block behind); false
// when the record changed meanwhile or could not be written (rescheduled).
func (d *Driver) loseLease(ctx context.Context, k leaseKey, n store.Network, ep store.Endpoint, old store.Lease, why string, log *slog.Logger) (store.Lease, bool) {
	marked := rules.MarkLost(old, d.now(), why)
	if d.commitLease(ctx, k, old, marked, log) != leaseRecorded {
		return old, false
	}
	d.blockLost(context.WithoutCancel(ctx), n, ep, marked)
	return marked, true
}

// leaseRecord reads a lease's network and endpoint under the endpoint's
// lock; false (and the lease forgotten or rescheduled) when there is
// nothing to renew.
func (d *Driver) leaseRecord(ctx context.Context, k leaseKey) (store.Network, store.Endpoint, bool) {
	ctx, unlock, n, ep, err := d.lockEndpoint(ctx, k.network, k.endpoint)
	if err != nil {
		d.leases.set(k, d.now().Add(dhcp.MinRetry))
		return store.Network{}, store.Endpoint{}, false
	}
	defer unlock()
	if n == nil || ep == nil || ep.Lease == nil || d.dhcp == nil {
		d.leases.drop(k)
		return store.Network{}, store.Endpoint{}, false
	}
	return *n, *ep, true
}

// commitLease's outcomes.
type leaseCommit int

const (
	leaseRecorded leaseCommit = iota
	// leaseGone: the endpoint is gone, or its record holds another lease.
	leaseGone
	// leaseNotRecorded: the record could not be written or read (a full
	// disk, shutdown); the lease is scheduled again shortly.
	leaseNotRecorded
)

// commitLease records l as the endpoint's lease under its lock if the
// record still holds old (it was not deleted or replaced meanwhile).
func (d *Driver) commitLease(ctx context.Context, k leaseKey, old, l store.Lease, log *slog.Logger) leaseCommit {
	_, unlock, _, ep, err := d.lockEndpoint(context.WithoutCancel(ctx), k.network, k.endpoint)
	if err != nil {
		log.Error("record DHCP lease", "error", err)
		d.leases.set(k, d.now().Add(dhcp.MinRetryShort))
		return leaseNotRecorded
	}
	defer unlock()
	if ep == nil || ep.Lease == nil || !ep.Lease.Acquired.Equal(old.Acquired) || !ep.Lease.Lost.Equal(old.Lost) {
		return leaseGone
	}
	renewed := *ep
	renewed.Lease = &l
	if err := d.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(renewed) }); err != nil {
		log.Error("record DHCP lease", "error", err)
		d.leases.set(k, d.now().Add(dhcp.MinRetryShort))
		return leaseNotRecorded
	}
	return leaseRecorded
}

// reacquire asks for a lost lease's address anew and takes only that one
// (its mask may change): another is never requested (LeaseRequest.Only).
func (d *Driver) reacquire(ctx context.Context, r LeaseRequest, old store.Lease) (store.Lease, error) {
	r.Only = leaseAddr(old)
	l, err := d.dhcp.Acquire(ctx, r)
	if err != nil {
		return l, err
	}
	if leaseAddr(l) != leaseAddr(old) {
		// A client that ignores Only: not ours to keep.
		_ = d.dhcp.Release(ctx, r, l)
		return store.Lease{}, fmt.Errorf("the server offered %s instead of %s", l.Addr, old.Addr)
	}
	return l, nil
}

// leaseAddr is a lease's address without its prefix length.
func leaseAddr(l store.Lease) netip.Addr {
	p, _ := netip.ParsePrefix(l.Addr)
	return p.Addr()
}
