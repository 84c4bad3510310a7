package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/store"
)

// Lease renewal: every DHCP lease is renewed at T1 and rebound at T2 for
// as long as its endpoint exists, across restarts (the times are in the
// endpoint's record). A NAK or a lost lease is logged at ERROR (Docker
// cannot be told a new address: libnetwork#843) and the same address is
// asked for again.

// nextLeaseAction is when to act on a lease next: the dhcp package's plan
// (T1, then retries at half the time left to T2 and to the expiry, at
// least dhcp.MinRetry apart), and every lostLeaseRetry once it has expired
// (the same address is asked for again).
func nextLeaseAction(l store.Lease, now time.Time) time.Time {
	p := dhcp.Plan(dhcp.Lease{Acquired: l.Acquired, T1: l.T1.Sub(l.Acquired), T2: l.T2.Sub(l.Acquired), LeaseTime: l.Expiry.Sub(l.Acquired)}, now)
	if p.Phase == dhcp.Expired {
		return now.Add(lostLeaseRetry)
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
	// running counts the renewal loop and its renewals; Close waits.
	running sync.WaitGroup
}

func newLeaseTimers() *leaseTimers {
	return &leaseTimers{due: map[leaseKey]time.Time{}, inFlight: map[leaseKey]bool{}, wake: make(chan struct{}, 1)}
}

// set schedules a lease (again), ending its flight.
func (t *leaseTimers) set(k leaseKey, at time.Time) {
	t.mu.Lock()
	t.due[k] = at
	delete(t.inFlight, k)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// drop forgets a lease.
func (t *leaseTimers) drop(k leaseKey) {
	t.mu.Lock()
	delete(t.due, k)
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
	if err := d.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n store.Network) error {
			if !dhcpOf(n).On {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				if ep.Lease == nil {
					continue
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

// renewLease renews one lease under its endpoint's lock, or asks for its
// address again once it expired or after a NAK, and schedules the next
// action.
func (d *Driver) renewLease(ctx context.Context, k leaseKey) {
	unlock, n, ep, err := d.lockEndpoint(ctx, k.network, k.endpoint)
	if err != nil {
		d.leases.set(k, d.now().Add(dhcp.MinRetry))
		return
	}
	defer unlock()
	if n == nil || ep == nil || ep.Lease == nil || d.dhcp == nil {
		d.leases.drop(k)
		return
	}
	old := *ep.Lease
	now := d.now()
	if now.Before(old.T1) {
		d.leases.set(k, old.T1)
		return
	}
	log := d.log.With("network", n.ID, "endpoint", ep.ID, "address", old.Addr)
	r, err := d.leaseRequest(ctx, *n, *ep)
	var l store.Lease
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, dhcpOf(*n).Timeout)
		if now.Before(old.Expiry) {
			l, err = d.dhcp.Renew(rctx, r, old)
		} else {
			// Expired: a server without a record of it stays silent to a
			// REQUEST (RFC 2131 4.3.2); a DISCOVER asking for the same
			// address wins it back.
			log.Error("DHCP lease expired: asking for the same address again (Docker cannot be told a new one: libnetwork#843)", "expiry", old.Expiry)
			l, err = d.reacquire(rctx, r, old)
		}
		if errors.Is(err, ErrLeaseNAK) {
			log.Error("the DHCP server refused to renew the lease: Docker cannot be told a new address (libnetwork#843); asking for the same address again", "error", err)
			l, err = d.reacquire(rctx, r, old)
		}
		cancel()
	}
	if err != nil {
		log.Warn("could not renew DHCP lease; retrying", "t2", old.T2, "expiry", old.Expiry, "error", err)
		d.leases.set(k, nextLeaseAction(old, now))
		return
	}
	renewed := *ep
	renewed.Lease = &l
	if err := d.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(renewed) }); err != nil {
		log.Error("record renewed DHCP lease", "error", err)
		d.leases.set(k, d.now().Add(dhcp.MinRetry))
		return
	}
	log.Info("renewed DHCP lease", "expiry", l.Expiry, "t1", l.T1)
	d.leases.set(k, nextLeaseAction(l, d.now()))
}

// reacquire asks for the old lease's address anew and keeps only that
// address (its mask may change); another one is given back.
func (d *Driver) reacquire(ctx context.Context, r LeaseRequest, old store.Lease) (store.Lease, error) {
	l, err := d.dhcp.Acquire(ctx, r)
	if err != nil {
		return l, err
	}
	if leaseAddr(l) != leaseAddr(old) {
		d.log.Error("the DHCP server offers another address; keeping the container's and asking again later", "address", old.Addr, "offered", l.Addr)
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
