package leases

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The journal of leases to give back (record.PendingRelease, one bucket
// for both families: Lease or Lease6): a lease is written there right
// after the server's ACK or Reply and in the transaction that deletes its
// endpoint, and removed once the endpoint's record holds it (in the
// endpoint's commit: Pending) or its release went out. A kill -9 between
// the two leaves it there; the next start releases it. What remains: a
// kill between the exchange and the journal's commit (about a
// millisecond) leaks that lease until it expires on the server.

// entry is the journal entry of an endpoint's lease.
func (ls *Leaser[L, R]) entry(n record.Network, ep record.Endpoint, r R, l L) record.PendingRelease {
	p := ls.Family.Entry(n, ep, r, l)
	p.Since = ls.now()
	return p
}

// Journal writes a lease just acquired to the journal before its
// endpoint's record is committed.
func (ls *Leaser[L, R]) Journal(ctx context.Context, n record.Network, ep record.Endpoint) error {
	l := ls.Family.Of(ep)
	if l == nil {
		return nil
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err == nil {
		rec := ls.entry(n, ep, r, *l)
		err = ls.store.Batch(func(tx *store.Tx) error { return tx.PutPendingRelease(rec) })
	}
	if err != nil {
		return fmt.Errorf("journal the %s lease %s of endpoint %s: %w", ls.Family.Words().Name, ls.Family.Facts(*l).Text, dockerid.Short(ep.ID), err)
	}
	return nil
}

// Pending removes the journal entry of the endpoint's lease, in the
// transaction that records the endpoint (which then holds it).
func (ls *Leaser[L, R]) Pending(tx *store.Tx, n record.Network, ep record.Endpoint) error {
	if l := ls.Family.Of(ep); l != nil {
		return tx.DeletePendingRelease(n.ID, ep.ID, ls.Family.Facts(*l).Text)
	}
	return nil
}

// JournalDeletion is the journal entry written with an endpoint's deletion:
// its held lease, to be released (nil without one to release, or without
// a client of the family to release it).
func (ls *Leaser[L, R]) JournalDeletion(ctx context.Context, n record.Network, ep record.Endpoint) *record.PendingRelease {
	l := ls.Family.Of(ep)
	if l == nil || !ls.Family.Facts(*l).Lost.IsZero() || !ls.Family.HasClient() {
		return nil
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return nil
	}
	rec := ls.entry(n, ep, r, *l)
	rec.Deletion = true
	return &rec
}

// Unjournal forgets a lease once recorded or released.
func (ls *Leaser[L, R]) Unjournal(n record.Network, ep record.Endpoint) {
	l := ls.Family.Of(ep)
	if l == nil {
		return
	}
	addr := ls.Family.Facts(*l).Text
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(n.ID, ep.ID, addr) }); err != nil {
		ls.log.Warn("could not forget a released "+ls.Family.Words().Name+" lease in the journal: the next start releases it again", "endpoint", ep.ID, "address", addr, "error", err)
	}
}

// releaseJournaled gives back, at start, the family's journaled leases
// that no endpoint's record holds (a kill -9 left them), and forgets the
// others and the expired ones. A lease that cannot be released now is
// kept for the next start, until it would have expired.
func (ls *Leaser[L, R]) releaseJournaled(ctx context.Context) {
	f := ls.Family
	var release func(context.Context, record.PendingRelease) error
	if f.HasClient() {
		release = func(ctx context.Context, p record.PendingRelease) error {
			r, l, _ := f.FromEntry(p)
			ctx, cancel := context.WithTimeout(ctx, config.DefaultDHCPTimeout)
			defer cancel()
			return f.Release(ctx, r, l)
		}
	}
	ReleaseJournaled(ctx, ls.store, ls.log, ls.now(), Journaled{
		Family: f.Words().Name,
		Mine: func(p record.PendingRelease) bool {
			_, _, ok := f.FromEntry(p)
			return ok
		},
		Held: func(ep record.Endpoint, p record.PendingRelease) bool {
			l := f.Of(ep)
			return l != nil && f.Facts(*l).Text == p.Addr()
		},
		Expiry: func(p record.PendingRelease) time.Time {
			_, l, _ := f.FromEntry(p)
			return f.Facts(l).Expiry
		},
		Release: release,
	})
}

// Journaled is one lease family's part of the journal, for
// ReleaseJournaled.
type Journaled struct {
	Family  string                                             // "DHCP", "DHCPv6": for the logs
	Mine    func(record.PendingRelease) bool                   // the family's entries
	Held    func(record.Endpoint, record.PendingRelease) bool  // the endpoint's record holds the entry's lease
	Expiry  func(record.PendingRelease) time.Time              // when the lease ends (zero: never)
	Release func(context.Context, record.PendingRelease) error // nil: no client
}

// ReleaseJournaled gives back the family's journaled leases that no
// endpoint's record holds, and forgets the others and the expired ones;
// one that cannot be released now is kept for the next start.
func ReleaseJournaled(ctx context.Context, st Store, log *slog.Logger, now time.Time, j Journaled) {
	var pending []record.PendingRelease
	held := map[[3]string]bool{}
	if err := st.View(func(tx *store.Tx) error {
		all, err := tx.PendingReleases()
		if err != nil {
			return err
		}
		for _, p := range all {
			if !j.Mine(p) {
				continue
			}
			pending = append(pending, p)
			ep, ok, err := tx.Endpoint(p.NetworkID, p.EndpointID)
			if err != nil {
				return err
			}
			if ok && j.Held(ep, p) {
				held[[3]string{p.NetworkID, p.EndpointID, p.Addr()}] = true
			}
		}
		return nil
	}); err != nil {
		log.Error("read the journal of "+j.Family+" leases to give back", "error", err)
		return
	}
	for _, p := range pending {
		exp := j.Expiry(p)
		forget := held[[3]string{p.NetworkID, p.EndpointID, p.Addr()}] || (!exp.IsZero() && !now.Before(exp))
		if !forget && j.Release != nil {
			short, left := leftBy(p)
			if err := j.Release(ctx, p); err != nil {
				log.Warn("could not release a "+j.Family+" lease "+short+": retrying at the next start until it expires", "endpoint", p.EndpointID, "address", p.Addr(), "error", err)
				continue
			}
			log.Info("released a "+j.Family+" lease "+left, "network", p.NetworkID, "endpoint", p.EndpointID, "address", p.Addr())
			forget = true
		}
		if forget {
			if err := st.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(p.NetworkID, p.EndpointID, p.Addr()) }); err != nil {
				log.Warn("could not forget a released "+j.Family+" lease in the journal", "error", err)
			}
		}
	}
}

// leftBy names how a journaled lease no record holds was left, briefly
// and in full: by its endpoint's deletion, whose own release did not go
// through (the daemon stopped before it, or the server did not answer
// it), or by a crash between the exchange and the endpoint's record (so
// are named the entries written before PendingRelease.Deletion was).
func leftBy(p record.PendingRelease) (short, full string) {
	if p.Deletion {
		d := "journaled by its endpoint's deletion, whose own release did not go through (the daemon stopped before it, or the server did not answer it)"
		return d, d
	}
	return "a crash left", "a crash left between its exchange and its record"
}
