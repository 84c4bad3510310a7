package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
)

const (
	// maxRenewals bounds the renewals in flight at once: one silent LAN
	// (each renewal waits up to dhcp_timeout) must not hold up the others.
	maxRenewals = 32
	// maxLeaseSleep caps the loop's sleep: timers stop while the host is
	// suspended, the server's clock does not; re-planning from the wall
	// clock every minute bounds how late a renewal can be.
	maxLeaseSleep = time.Minute
)

// Run loads every lease from the state file and renews each when due, at
// most maxRenewals at once, until ctx ends or the driver closes (RunLeases).
// It first makes the kernel's blocks those of the lost leases of both
// families (rules.LostBlocks); run it before the DHCPv6 leaser's Run.
func (ls *Leaser) Run(ctx context.Context) error {
	now := ls.now()
	if err := ls.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n store.Network) error {
			if !rules.DHCPOf(n).On {
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
				ls.timers.Set(Key{n.ID, ep.ID}, at)
			}
			return err
		})
	}); err != nil {
		return err
	}
	ls.timers.Go(func() { // not before serving: a RELEASE may wait on a parent
		ls.releaseJournaled(ctx)
	})
	// The DHCPv6 leaser's lost leases too: one plan for the instance's
	// blocks of both families.
	if err := ls.restoreBlocks(ctx); err != nil {
		ls.log.Error("could not block the addresses of lost DHCP and DHCPv6 leases again: their containers may send from addresses they do not hold", "error", err)
	}
	ls.timers.Loop(ctx, ls.stop, ls.now, ls.Renew)
	return nil
}

// Renew renews one lease, marks it lost once it expired or the
// server refused it, and asks for a lost one's address again; then it
// schedules the next action. The endpoint's lock is held only to read the
// record and to commit the outcome, not across the exchange with the
// server: DeleteEndpoint does not wait for a silent LAN, it cancels the
// exchange (Timers.cancel).
func (ls *Leaser) Renew(ctx context.Context, k Key) {
	n, ep, ok := ls.leaseRecord(ctx, k)
	if !ok {
		return
	}
	old := *ep.Lease
	now := ls.now()
	if old.Lost.IsZero() && now.Before(old.T1) {
		ls.timers.Set(k, old.T1)
		return
	}
	log := ls.log.With("network", n.ID, "endpoint", ep.ID, "address", old.Addr)
	// A renewal waits no longer than dhcp_timeout, nor past the lease's
	// expiry (then it is lost, and that is acted on at once).
	deadline := now.Add(rules.DHCPOf(n).Timeout)
	if old.Lost.IsZero() && old.Expiry.After(now) && old.Expiry.Before(deadline) {
		deadline = old.Expiry
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if !ls.timers.Exchange(k, cancel) {
		return // the endpoint is being deleted
	}
	defer ls.timers.Exchanged(k)
	if old.Lost.IsZero() && !now.Before(old.Expiry) {
		// Expired: lost, whether or not the server can be asked now.
		if old, ok = ls.loseLease(ctx, k, n, ep, old, "the lease expired without a renewal", log); !ok {
			return
		}
		ep.Lease = &old
	}
	r, err := ls.RequestOf(rctx, n, ep)
	var l store.Lease
	switch {
	case err != nil:
	case !old.Lost.IsZero():
		l, err = ls.reacquire(rctx, r, old)
	default:
		l, err = ls.DHCP.Renew(rctx, r, old)
		if errors.Is(err, ErrNAK) {
			if old, ok = ls.loseLease(ctx, k, n, ep, old, "the server refused to renew it (DHCPNAK): "+err.Error(), log); !ok {
				return
			}
			ep.Lease = &old
			l, err = ls.reacquire(rctx, r, old) // ask for it again at once
		}
	}
	if err != nil {
		next := NextAction(old, ls.now()) // after the exchange, which took its time
		if old.Lost.IsZero() {
			log.Warn("could not renew DHCP lease; retrying", "t2", old.T2, "expiry", old.Expiry, "next", next, "error", err)
		} else {
			log.Debug("lost DHCP lease not won back yet; asking again", "next", next, "error", err)
		}
		ls.timers.Set(k, next)
		return
	}
	switch ls.commitLease(ctx, k, old, l, log) {
	case leaseGone:
		// The endpoint went meanwhile: the lease this exchange extended or
		// won is not kept for anyone.
		_ = ls.DHCP.Release(context.WithoutCancel(ctx), r, l)
		return
	case leaseNotRecorded:
		return // rescheduled: the record keeps the old lease, which the server extended
	}
	if !old.Lost.IsZero() {
		ls.wonBack(context.WithoutCancel(ctx), n, ep, old)
	} else {
		log.Info("renewed DHCP lease", "expiry", l.Expiry, "t1", l.T1)
	}
	ls.timers.Set(k, NextAction(l, ls.now()))
}

// loseLease records a lease lost, then blocks its address (only once the
// record says lost: a deletion in between leaves no block behind); false
// when the record changed meanwhile or could not be written (rescheduled).
func (ls *Leaser) loseLease(ctx context.Context, k Key, n store.Network, ep store.Endpoint, old store.Lease, why string, log *slog.Logger) (store.Lease, bool) {
	marked := rules.MarkLost(old, ls.now(), why)
	if ls.commitLease(ctx, k, old, marked, log) != leaseRecorded {
		return old, false
	}
	ls.blockLost(context.WithoutCancel(ctx), n, ep, marked)
	return marked, true
}

// leaseRecord reads a lease's network and endpoint under the endpoint's
// lock; false (and the lease forgotten or rescheduled) when there is
// nothing to renew.
func (ls *Leaser) leaseRecord(ctx context.Context, k Key) (store.Network, store.Endpoint, bool) {
	ctx, unlock, n, ep, err := ls.lockEndpoint(ctx, k.Network, k.Endpoint)
	if err != nil {
		ls.timers.Set(k, ls.now().Add(dhcp.MinRetry))
		return store.Network{}, store.Endpoint{}, false
	}
	defer unlock()
	if n == nil || ep == nil || ep.Lease == nil || ls.DHCP == nil {
		ls.timers.Drop(k)
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
func (ls *Leaser) commitLease(ctx context.Context, k Key, old, l store.Lease, log *slog.Logger) leaseCommit {
	_, unlock, _, ep, err := ls.lockEndpoint(context.WithoutCancel(ctx), k.Network, k.Endpoint)
	if err != nil {
		log.Error("record DHCP lease", "error", err)
		ls.timers.Set(k, ls.now().Add(dhcp.MinRetryShort))
		return leaseNotRecorded
	}
	defer unlock()
	if ep == nil || ep.Lease == nil || !ep.Lease.Acquired.Equal(old.Acquired) || !ep.Lease.Lost.Equal(old.Lost) {
		return leaseGone
	}
	renewed := *ep
	renewed.Lease = &l
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(renewed) }); err != nil {
		log.Error("record DHCP lease", "error", err)
		ls.timers.Set(k, ls.now().Add(dhcp.MinRetryShort))
		return leaseNotRecorded
	}
	return leaseRecorded
}

// reacquire asks for a lost lease's address anew and takes only that one
// (its mask may change): another is never requested (Request.Only).
func (ls *Leaser) reacquire(ctx context.Context, r Request, old store.Lease) (store.Lease, error) {
	r.Only = Addr(old)
	l, err := ls.DHCP.Acquire(ctx, r)
	if err != nil {
		return l, err
	}
	if Addr(l) != Addr(old) {
		// A client that ignores Only: not ours to keep.
		_ = ls.DHCP.Release(ctx, r, l)
		return store.Lease{}, fmt.Errorf("the server offered %s instead of %s", l.Addr, old.Addr)
	}
	return l, nil
}

// Addr is a lease's address without its prefix length.
func Addr(l store.Lease) netip.Addr {
	p, _ := netip.ParsePrefix(l.Addr)
	return p.Addr()
}
