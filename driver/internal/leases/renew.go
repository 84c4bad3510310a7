package leases

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
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

// Run loads every lease of the family from the state file and renews
// each when due, at most maxRenewals at once, until ctx ends or the
// driver closes (Leases.Run), and releases what the journal holds that
// no record does.
func (ls *Leaser[L, R]) Run(ctx context.Context) error {
	f, now := ls.Family, ls.now()
	if err := ls.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error {
			if !f.On(n) {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				l := f.Of(ep)
				if l == nil {
					continue
				}
				// A renewal that fell due while the daemon was down is
				// sent now (Resume).
				ls.timers.Set(Key{n.ID, ep.ID}, f.Resume(*l, now))
			}
			return err
		})
	}); err != nil {
		return err
	}
	ls.timers.Go(func() { // not before serving: a release may wait on a parent
		ls.releaseJournaled(ctx)
	})
	ls.timers.Loop(ctx, ls.stop, ls.now, ls.Renew)
	return nil
}

// Renew renews one lease as its plan says, marks it lost once it expired
// or the server refused it, and asks for a lost one's address again
// (only that one: Docker cannot be told another); then it schedules the
// next action. The endpoint's lock is held only to read the record and to
// commit the outcome, not across the exchange with the server:
// DeleteEndpoint does not wait for a silent LAN, it cancels the exchange
// (Timers.Drop).
func (ls *Leaser[L, R]) Renew(ctx context.Context, k Key) {
	n, ep, ok := ls.leaseRecord(ctx, k)
	if !ok {
		return
	}
	f, w := ls.Family, ls.Family.Words()
	old := *f.Of(ep)
	now := ls.now()
	if at, due := f.Due(old, now); !due {
		ls.timers.Set(k, at)
		return
	}
	log := ls.log.With("network", n.ID, "endpoint", ep.ID, "address", f.Facts(old).Text)
	rctx, cancel := f.Exchange(ctx, n, old, now)
	defer cancel()
	if !ls.timers.Exchange(k, cancel) {
		return // the endpoint is being deleted
	}
	defer ls.timers.Exchanged(k)
	if f.Facts(old).Lost.IsZero() && f.Expired(old, now) {
		// Expired: lost, whether or not the server can be asked now.
		if old, ok = ls.lose(ctx, k, n, ep, old, w.ExpiredWhy, log); !ok {
			return
		}
		ep = f.With(ep, &old)
	}
	r, err := ls.RequestOf(rctx, n, ep)
	var l L
	switch {
	case err != nil:
	case !f.Facts(old).Lost.IsZero():
		l, err = ls.reacquire(rctx, r, old)
	default:
		l, err = f.Renew(rctx, r, old, now)
		if why, refused := f.Refused(err); refused {
			if old, ok = ls.lose(ctx, k, n, ep, old, why, log); !ok {
				return
			}
			ep = f.With(ep, &old)
			l, err = ls.reacquire(rctx, r, old) // ask for it again at once
		}
	}
	if err != nil {
		next := f.Next(old, ls.now()) // after the exchange, which took its time
		if f.Facts(old).Lost.IsZero() {
			f.RenewFailed(log, old, next, err)
		} else {
			log.Debug(w.NotWonBack, "next", next, "error", err)
		}
		ls.timers.Set(k, next)
		return
	}
	switch ls.commit(ctx, k, old, l, log) {
	case leaseGone:
		// The endpoint went meanwhile: the lease this exchange extended or
		// won is not kept for anyone.
		ls.giveBack(ctx, r, l)
		return
	case leaseNotRecorded:
		return // rescheduled: the record keeps the old lease, which the server extended
	}
	if !f.Facts(old).Lost.IsZero() {
		ls.wonBack(context.WithoutCancel(ctx), n, ep, old)
	} else {
		log.Info(w.Renewed, f.Renewed(l)...)
	}
	ls.timers.Set(k, f.Next(l, ls.now()))
}

// lose records a lease lost, then blocks its address (only once the
// record says lost: a deletion in between leaves no block behind); false
// when the record changed meanwhile or could not be written (rescheduled).
func (ls *Leaser[L, R]) lose(ctx context.Context, k Key, n record.Network, ep record.Endpoint, old L, why string, log *slog.Logger) (L, bool) {
	marked := ls.Family.MarkLost(old, ls.now(), why)
	if ls.commit(ctx, k, old, marked, log) != leaseRecorded {
		return old, false
	}
	ls.blockLost(context.WithoutCancel(ctx), k, n, ep, marked)
	return marked, true
}

// leaseRecord reads a lease's network and endpoint under the endpoint's
// lock; false (and the lease forgotten or rescheduled) when there is
// nothing to renew.
func (ls *Leaser[L, R]) leaseRecord(ctx context.Context, k Key) (record.Network, record.Endpoint, bool) {
	_, unlock, n, ep, err := ls.lockEndpoint(ctx, k.Network, k.Endpoint)
	if err != nil {
		ls.timers.Set(k, ls.now().Add(ls.Family.Words().LockRetry))
		return record.Network{}, record.Endpoint{}, false
	}
	defer unlock()
	if n == nil || ep == nil || ls.Family.Of(*ep) == nil || !ls.Family.HasClient() {
		ls.timers.Drop(k)
		return record.Network{}, record.Endpoint{}, false
	}
	return *n, *ep, true
}

// commit's outcomes.
type leaseCommit int

const (
	leaseRecorded leaseCommit = iota
	// leaseGone: the endpoint is gone, or its record holds another lease.
	leaseGone
	// leaseNotRecorded: the record could not be written or read (a full
	// disk, shutdown); the lease is scheduled again shortly.
	leaseNotRecorded
)

// commit records l as the endpoint's lease under its lock if the record
// still holds old (it was not deleted or replaced meanwhile). The lock is
// waited for beyond the exchange's deadline.
func (ls *Leaser[L, R]) commit(ctx context.Context, k Key, old, l L, log *slog.Logger) leaseCommit {
	f, w := ls.Family, ls.Family.Words()
	_, unlock, _, ep, err := ls.lockEndpoint(context.WithoutCancel(ctx), k.Network, k.Endpoint)
	if err == nil {
		defer unlock()
		held := f.Of(derefEndpoint(ep))
		if ep == nil || held == nil || f.Facts(*held).Text != f.Facts(old).Text || !f.Facts(*held).Acquired.Equal(f.Facts(old).Acquired) || !f.Facts(*held).Lost.Equal(f.Facts(old).Lost) {
			return leaseGone
		}
		renewed := f.With(*ep, &l)
		err = ls.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(renewed) })
	}
	if err != nil {
		log.Log(context.WithoutCancel(ctx), w.NoRecordLvl, w.NoRecord, "error", err)
		ls.timers.Set(k, ls.now().Add(w.CommitRetry))
		return leaseNotRecorded
	}
	return leaseRecorded
}

func derefEndpoint(ep *record.Endpoint) record.Endpoint {
	if ep == nil {
		return record.Endpoint{}
	}
	return *ep
}

// reacquire asks for a lost lease's address anew and takes only that one
// (a DHCP lease's mask may change): another is given back.
func (ls *Leaser[L, R]) reacquire(ctx context.Context, r R, old L) (L, error) {
	f := ls.Family
	l, err := f.Acquire(ctx, r, f.Facts(old).Addr)
	if err != nil {
		return l, err
	}
	if f.Facts(l).Addr != f.Facts(old).Addr {
		// An address offered instead: not ours to keep.
		ls.giveBack(ctx, r, l)
		var none L
		return none, fmt.Errorf("the server offered %s instead of %s", f.Facts(l).Text, f.Facts(old).Text)
	}
	return l, nil
}
