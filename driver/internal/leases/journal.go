package leases

import (
	"context"
	"encoding/hex"
	"net"
	"slices"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
)

// The journal of leases to give back (store.PendingRelease): a lease is
// written there right after the server's ACK and in the transaction that
// deletes its endpoint, and removed once the endpoint's record holds it or
// its RELEASE went out. A kill -9 between the two leaves it there; the next
// start releases it. What remains: a kill between the ACK and the
// journal's commit (about a millisecond) leaks that lease until it
// expires on the server.

// pendingRelease is the journal entry of an endpoint's lease.
func (ls *Leaser) pendingRelease(n store.Network, ep store.Endpoint, r Request) store.PendingRelease {
	return store.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: r.Parent, MAC: r.MAC.String(),
		ClientID: hex.EncodeToString(r.ClientID), Lease: *ep.Lease, Since: ls.now()}
}

// Journal writes a lease just acquired to the journal before its
// endpoint's record is committed.
func (ls *Leaser) Journal(ctx context.Context, n store.Network, ep store.Endpoint) error {
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return err
	}
	rec := ls.pendingRelease(n, ep, r)
	return ls.store.Batch(func(tx *store.Tx) error { return tx.PutPendingRelease(rec) })
}

// JournalDeletion is the journal entry written with an endpoint's deletion:
// its held lease, to be released (nil without one to release).
func (ls *Leaser) JournalDeletion(ctx context.Context, n store.Network, ep store.Endpoint) *store.PendingRelease {
	if ep.Lease == nil || !ep.Lease.Lost.IsZero() {
		return nil
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return nil
	}
	rec := ls.pendingRelease(n, ep, r)
	return &rec
}

// Unjournal forgets a lease once recorded or released.
func (ls *Leaser) Unjournal(n store.Network, ep store.Endpoint) {
	if ep.Lease == nil {
		return
	}
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(n.ID, ep.ID, ep.Lease.Addr) }); err != nil {
		ls.log.Warn("could not forget a released lease in the journal: the next start releases it again", "endpoint", ep.ID, "address", ep.Lease.Addr, "error", err)
	}
}

// releaseJournaled gives back, at start, the journaled leases that no
// endpoint's record holds (a kill -9 left them), and forgets the others.
// A lease that cannot be released now is kept until it would have expired.
func (ls *Leaser) releaseJournaled(ctx context.Context) {
	var pending []store.PendingRelease
	held := map[[3]string]bool{}
	if err := ls.store.View(func(tx *store.Tx) (err error) {
		if pending, err = tx.PendingReleases(); err != nil || len(pending) == 0 {
			return err
		}
		pending = slices.DeleteFunc(pending, func(p store.PendingRelease) bool { return p.Lease6 != nil }) // leases6's
		for _, p := range pending {
			ep, ok, err := tx.Endpoint(p.NetworkID, p.EndpointID)
			if err != nil {
				return err
			}
			if ok && ep.Lease != nil && ep.Lease.Addr == p.Lease.Addr {
				held[[3]string{p.NetworkID, p.EndpointID, p.Lease.Addr}] = true
			}
		}
		return nil
	}); err != nil {
		ls.log.Error("read the journal of leases to give back", "error", err)
		return
	}
	for _, p := range pending {
		forget := held[[3]string{p.NetworkID, p.EndpointID, p.Lease.Addr}] || !ls.now().Before(p.Lease.Expiry)
		if !forget && ls.DHCP != nil {
			mac, _ := net.ParseMAC(p.MAC)
			id, _ := hex.DecodeString(p.ClientID)
			rctx, cancel := context.WithTimeout(ctx, rules.DefaultDHCPTimeout)
			err := ls.DHCP.Release(rctx, Request{Parent: p.Parent, MAC: mac, ClientID: id}, p.Lease)
			cancel()
			if err != nil {
				ls.log.Warn("could not release a lease a crash left: retrying at the next start until it expires", "endpoint", p.EndpointID, "address", p.Lease.Addr, "error", err)
				continue
			}
			ls.log.Info("released a lease a crash left between its exchange and its record", "network", p.NetworkID, "endpoint", p.EndpointID, "address", p.Lease.Addr)
			forget = true
		}
		if forget {
			if err := ls.store.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(p.NetworkID, p.EndpointID, p.Lease.Addr) }); err != nil {
				ls.log.Warn("could not forget a released lease in the journal", "error", err)
			}
		}
	}
}
