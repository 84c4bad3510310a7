package leases6

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"

	"github.com/underlay-net/underlay/dhcp6"
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
	var pending []store.PendingRelease
	held := map[[3]string]bool{}
	if err := ls.store.View(func(tx *store.Tx) error {
		all, err := tx.PendingReleases()
		if err != nil {
			return err
		}
		for _, p := range all {
			if p.Lease6 == nil {
				continue // the DHCP leaser's
			}
			pending = append(pending, p)
			ep, ok, err := tx.Endpoint(p.NetworkID, p.EndpointID)
			if err != nil {
				return err
			}
			if ok && ep.Lease6 != nil && ep.Lease6.Addr == p.Lease6.Addr {
				held[[3]string{p.NetworkID, p.EndpointID, p.Lease6.Addr}] = true
			}
		}
		return nil
	}); err != nil {
		ls.log.Error("read the journal of DHCPv6 leases to give back", "error", err)
		return
	}
	for _, p := range pending {
		exp := p.Lease6.Expiry()
		forget := held[[3]string{p.NetworkID, p.EndpointID, p.Lease6.Addr}] || (!exp.IsZero() && !ls.now().Before(exp))
		if !forget && ls.dhcp != nil {
			mac, _ := net.ParseMAC(p.MAC)
			duid, _ := hex.DecodeString(p.Lease6.DUID)
			l := Lease(*p.Lease6)
			r := dhcp6.Request{Parent: p.Parent, MAC: mac, DUID: duid, IAID: l.IAID}
			rctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
			err := ls.dhcp.Release(rctx, l, r)
			cancel()
			if err != nil {
				ls.log.Warn("could not release a DHCPv6 lease a crash left: retrying at the next start until it expires", "endpoint", p.EndpointID, "address", p.Lease6.Addr, "error", err)
				continue
			}
			ls.log.Info("released a DHCPv6 lease a crash left between its exchange and its record", "network", p.NetworkID, "endpoint", p.EndpointID, "address", p.Lease6.Addr)
			forget = true
		}
		if forget {
			if err := ls.store.Batch(func(tx *store.Tx) error { return tx.DeletePendingRelease(p.NetworkID, p.EndpointID, p.Lease6.Addr) }); err != nil {
				ls.log.Warn("could not forget a released DHCPv6 lease in the journal", "error", err)
			}
		}
	}
}

