package driver

import (
	"context"
	"errors"
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

// leaseTimers are the due times of the leases this daemon renews.
type leaseTimers struct {
	mu   sync.Mutex
	due  map[leaseKey]time.Time
	wake chan struct{}
}

func newLeaseTimers() *leaseTimers {
	return &leaseTimers{due: map[leaseKey]time.Time{}, wake: make(chan struct{}, 1)}
}

func (t *leaseTimers) set(k leaseKey, at time.Time) {
	t.mu.Lock()
	t.due[k] = at
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *leaseTimers) drop(k leaseKey) {
	t.mu.Lock()
	delete(t.due, k)
	t.mu.Unlock()
}

// next returns the leases due at now and the earliest later due time.
func (t *leaseTimers) next(now time.Time) (due []leaseKey, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, when := range t.due {
		if !when.After(now) {
			due = append(due, k)
		} else if at.IsZero() || when.Before(at) {
			at = when
		}
	}
	return due, at
}

// RunLeases loads every lease from the state file and renews each when due
// until ctx ends. Call it after Restore.
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
	go func() {
		for {
			due, at := d.leases.next(d.now())
			for _, k := range due {
				d.renewLease(ctx, k)
			}
			if len(due) > 0 {
				continue
			}
			wait := time.Hour
			if !at.IsZero() {
				wait = at.Sub(d.now())
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
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
// address again after a NAK, and schedules the next action.
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
		l, err = d.dhcp.Renew(rctx, r, old)
		if errors.Is(err, ErrLeaseNAK) {
			log.Error("the DHCP server refused to renew the lease: Docker cannot be told a new address (libnetwork#843); asking for the same address again", "error", err)
			l, err = d.dhcp.Acquire(rctx, r)
			if err == nil && l.Addr != old.Addr {
				log.Error("the DHCP server offers another address; keeping the container's and asking again later", "offered", l.Addr)
				_ = d.dhcp.Release(rctx, r, l)
				err = errors.New("offered another address")
			}
		}
		cancel()
	}
	if err != nil {
		if !now.Before(old.Expiry) {
			log.Error("DHCP lease expired and could not be renewed: the address may be handed to another host; retrying", "expiry", old.Expiry, "error", err)
		} else {
			log.Warn("could not renew DHCP lease; retrying", "t2", old.T2, "expiry", old.Expiry, "error", err)
		}
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
