package leases6

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
)

// The journal of DHCPv6 leases to give back, in the DHCP journal's bucket
// (store.PendingRelease with Lease6; driver/internal/leases journal.go):
// a lease is written there right after the server's Reply and in the
// transaction that deletes its endpoint, and removed once the endpoint's
// record holds it or its Release went out. A kill -9 between the two
// leaves it there; the next start (Run) releases it. What remains: a kill
// between the Reply and the journal's commit (about a millisecond) leaks
// that lease until it expires on the server.

// pendingRelease is the journal entry of an endpoint's DHCPv6 lease.
func (ls *Leaser) pendingRelease(n store.Network, ep store.Endpoint, r dhcp6.Request) store.PendingRelease {
	l := *ep.Lease6
	return store.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: r.Parent, MAC: r.MAC.String(), Lease6: &l, Since: ls.now()}
}

// Journal writes a lease just acquired to the journal before its
// endpoint's record is committed.
func (ls *Leaser) Journal(ctx context.Context, n store.Network, ep store.Endpoint) error {
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return err
	}
	rec := ls.pendingRelease(n, ep, r)
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.PutPendingRelease(rec) }); err != nil {
		return fmt.Errorf("journal the DHCPv6 lease %s of endpoint %s: %w", ep.Lease6.Addr, dockerid.Short(ep.ID), err)
	}
	return nil
}

// JournalDeletion is the journal entry written with an endpoint's
// deletion: its held DHCPv6 lease, to be released (nil without one).
func (ls *Leaser) JournalDeletion(ctx context.Context, n store.Network, ep store.Endpoint) *store.PendingRelease {
	if ep.Lease6 == nil || !ep.Lease6.Lost.IsZero() || ls.dhcp == nil {
		return nil
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return nil
	}
	rec := ls.pendingRelease(n, ep, r)
	rec.Deletion = true
	return &rec
}

// unjournal forgets a lease once recorded or released.
func (ls *Leaser) unjournal(n store.Network, ep store.Endpoint) {
	if ep.Lease6 == nil {
		return
	}
	if err := ls.store.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(n.ID, ep.ID, ep.Lease6.Addr) }); err != nil {
		ls.log.Warn("could not forget a released DHCPv6 lease in the journal: the next start releases it again", "endpoint", ep.ID, "address", ep.Lease6.Addr, "error", err)
	}
}

// releaseJournaled gives back, at start, the journaled DHCPv6 leases no
// endpoint's record holds (a kill -9 left them), and forgets the others;
// one that cannot be released now is kept until it would have expired.
func (ls *Leaser) releaseJournaled(ctx context.Context) {
	var release func(context.Context, store.PendingRelease) error
	if ls.dhcp != nil {
		release = func(ctx context.Context, p store.PendingRelease) error {
			mac, _ := net.ParseMAC(p.MAC)
			duid, _ := hex.DecodeString(p.Lease6.DUID)
			l := Lease(*p.Lease6)
			ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
			defer cancel()
			return ls.dhcp.Release(ctx, l, dhcp6.Request{Parent: p.Parent, MAC: mac, DUID: duid, IAID: l.IAID})
		}
	}
	leases.ReleaseJournaled(ctx, ls.store, ls.log, ls.now(), leases.Journaled{
		Family: "DHCPv6",
		Mine:   func(p store.PendingRelease) bool { return p.Lease6 != nil },
		Held: func(ep store.Endpoint, p store.PendingRelease) bool {
			return ep.Lease6 != nil && ep.Lease6.Addr == p.Lease6.Addr
		},
		Expiry:  func(p store.PendingRelease) time.Time { return p.Lease6.Expiry() },
		Release: release,
	})
}
