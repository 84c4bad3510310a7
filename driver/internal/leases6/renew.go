package leases6

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
)

// exchangeTimeout bounds one renewal's exchange with the servers.
const exchangeTimeout = 10 * time.Second

// Run loads every DHCPv6 lease from the state file and renews each when
// due until ctx ends or the driver closes, and releases what the journal
// holds that no record does. Call it after Restore.
func (ls *Leaser) Run(ctx context.Context) error {
	now := ls.now()
	if err := ls.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n store.Network) error {
			if rules.IPv6ModeOf(n) != rules.IPv6DHCPv6 {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				if ep.Lease6 != nil {
					// A renewal that fell due while the daemon was down
					// is sent now.
					at := next(*ep.Lease6, now)
					if at.Before(now) {
						at = now
					}
					ls.timers.Set(leases.Key{Network: n.ID, Endpoint: ep.ID}, at)
				}
			}
			return err
		})
	}); err != nil {
		return err
	}
	ls.timers.Go(func() { // not before serving: a Release may wait on a parent
		ls.releaseJournaled(ctx)
	})
	ls.timers.Loop(ctx, ls.stop, ls.now, ls.Renew)
	return nil
}

// Renew acts on one lease as its plan says: Renew while renewing, Rebind
// while rebinding, and once it expired or the server no longer holds it,
// ask for the same address again (Solicit with it as the hint); another
// address is given back, not taken: Docker cannot be told a new one. The
// endpoint's lock is held only to read the record and to commit.
func (ls *Leaser) Renew(ctx context.Context, k leases.Key) {
	n, ep, ok := ls.record(ctx, k)
	if !ok {
		return
	}
	old := *ep.Lease6
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		ls.log.Warn("cannot renew a DHCPv6 lease", "network", n.ID, "endpoint", ep.ID, "error", err)
		ls.timers.Set(k, ls.now().Add(lostRetry))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	if !ls.timers.Exchange(k, cancel) {
		return // the endpoint is being deleted
	}
	defer ls.timers.Exchanged(k)
	now := ls.now()
	l := Lease(old)
	s := dhcp6.Plan(l, now)
	var got dhcp6.Lease
	switch {
	case !old.Lost.IsZero() || s.Phase == dhcp6.Expired:
		if old.Lost.IsZero() {
			ls.lost(ctx, k, n, old, "it expired without a renewal")
		}
		ls.winBack(ctx, k, n, ep, r)
		return
	case s.Phase == dhcp6.Bound:
		ls.timers.Set(k, s.Next)
		return
	case s.Phase == dhcp6.Renewing:
		got, err = ls.dhcp.Renew(ctx, l, r)
	default:
		got, err = ls.dhcp.Rebind(ctx, l, r)
	}
	switch {
	case errors.Is(err, dhcp6.ErrNoBinding):
		ls.lost(ctx, k, n, old, err.Error())
		ls.winBack(ctx, k, n, ep, r)
	case err != nil:
		ls.log.Debug("DHCPv6 renewal failed; the lease stands until it expires", "endpoint", ep.ID, "address", old.Addr, "error", err)
		ls.timers.Set(k, dhcp6.Plan(l, ls.now()).Next)
	default:
		rec := Record(got, r)
		if ls.commit(ctx, k, old, rec) {
			ls.log.Info("renewed IPv6 address", "network", n.ID, "endpoint", ep.ID, "address", rec.Addr, "valid", got.Valid)
			ls.timers.Set(k, next(rec, ls.now()))
		}
	}
}

// winBack asks for a lost lease's address again; another address is
// given back at once.
func (ls *Leaser) winBack(ctx context.Context, k leases.Key, n store.Network, ep store.Endpoint, r dhcp6.Request) {
	old := lostAs(*ep.Lease6, ls.now()) // as lost() recorded it
	want := Lease(old).Addr
	r.Hint = want
	got, err := ls.dhcp.Acquire(ctx, r)
	switch {
	case err != nil:
		ls.log.Debug("could not win a lost DHCPv6 lease back", "endpoint", ep.ID, "address", old.Addr, "error", err)
	case got.Addr != want:
		ls.giveBack(ctx, got, r) // an address offered instead of the lost one
	default:
		rec := Record(got, r)
		if ls.commit(ctx, k, old, rec) {
			ls.wonBack(ctx, n, ep, old)
			ls.timers.Set(k, next(rec, ls.now()))
		} else if _, ok := ls.timers.Due(k); !ok {
			ls.giveBack(ctx, got, r) // the endpoint went meanwhile: not ours to keep
		}
		return
	}
	ls.timers.Set(k, ls.now().Add(lostRetry))
}

// record reads an endpoint's lease under its lock; false (and the lease
// dropped) when the endpoint or its lease is gone.
func (ls *Leaser) record(ctx context.Context, k leases.Key) (store.Network, store.Endpoint, bool) {
	_, unlock, n, ep, err := ls.lockEndpoint(ctx, k.Network, k.Endpoint)
	if err != nil {
		ls.timers.Set(k, ls.now().Add(lostRetry))
		return store.Network{}, store.Endpoint{}, false
	}
	defer unlock()
	if n == nil || ep == nil || ep.Lease6 == nil {
		ls.timers.Drop(k)
		return store.Network{}, store.Endpoint{}, false
	}
	return *n, *ep, true
}

// commit writes rec as the endpoint's lease if the record still holds
// old (the endpoint was not deleted or re-created meanwhile: then the
// lease is no longer scheduled). The lock is waited for beyond the
// exchange's deadline; a record that cannot be read or written (a full
// disk) has the lease acted on again in commitRetry.
func (ls *Leaser) commit(ctx context.Context, k leases.Key, old, rec store.Lease6) bool {
	_, unlock, n, ep, err := ls.lockEndpoint(context.WithoutCancel(ctx), k.Network, k.Endpoint)
	if err != nil {
		ls.log.Warn("could not record a DHCPv6 lease: trying again shortly", "endpoint", k.Endpoint, "error", err)
		ls.timers.Set(k, ls.now().Add(commitRetry))
		return false
	}
	defer unlock()
	if n == nil || ep == nil || ep.Lease6 == nil || ep.Lease6.Addr != old.Addr || !ep.Lease6.Acquired.Equal(old.Acquired) {
		ls.timers.Drop(k)
		return false
	}
	e := *ep
	e.Lease6 = &rec
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(e) }); err != nil {
		ls.log.Warn("could not record a DHCPv6 lease: trying again shortly", "endpoint", k.Endpoint, "error", fmt.Errorf("record endpoint %s: %w", k.Endpoint, err))
		ls.timers.Set(k, ls.now().Add(commitRetry))
		return false
	}
	return true
}

// commitRetry is how soon a lease whose outcome could not be recorded is
// acted on again (the server's side stands: a renewal is repeated).
const commitRetry = 5 * time.Second
