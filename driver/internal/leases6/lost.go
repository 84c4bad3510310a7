package leases6

import (
	"context"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/store"
)

// A DHCPv6 lease lost (expired without a renewal, or the server no longer
// has the binding): RFC 8415 18.2.10.1 says the client must stop using
// the address, but Docker cannot be told another address and underlay
// does not enter containers. As for DHCP (driver/internal/leases lost.go)
// the address is blocked on the parent's egress (the AddrBlocker: IPv6
// packets from it dropped) from the loss until the same address is won
// back, which is asked for every lostRetry; another address is never
// taken. The blocks of lost leases are restored at start with the DHCP
// ones (leases.Leaser.Run, rules.LostBlocks).

// lost marks the lease lost in the record and blocks its address (logged
// once, at ERROR).
func (ls *Leaser) lost(ctx context.Context, k leases.Key, n store.Network, old store.Lease6, why string) {
	rec := lostAs(old, ls.now())
	rec.LostWhy = why
	if !ls.commit(ctx, k, old, rec) {
		return
	}
	log := ls.log.With("network", k.Network, "endpoint", k.Endpoint, "address", old.Addr, "why", why)
	addr := Lease(old).Addr
	switch {
	case ls.blocker == nil:
		log.Error("lost a DHCPv6 lease, and this daemon cannot block the address: the container keeps sending from it; restart the container to get a new address")
	case !addr.IsValid():
		log.Error("lost a DHCPv6 lease whose recorded address is not an address: it cannot be blocked; restart the container to get a new address")
	default:
		parent, err := leases.BlockOnParent(ctx, ls.store, ls.blocker, ls.lockParents, n.ID, addr, ls.mark)
		if err != nil {
			log.Error("lost a DHCPv6 lease, and blocking the address on the parent failed: the container keeps sending from it; restart the container to get a new address", "parent", n.Parent, "error", err)
			return
		}
		if parent == "" || !ls.stillLost(ctx, k, parent, old.Addr) {
			return // the endpoint went between the record and the block (its deletion found no block)
		}
		log.Error("lost a DHCPv6 lease: the container can no longer send from the address (blocked on the parent) until the server gives it back; underlay asks for it every 30s; restart the container to get a new address", "parent", parent)
	}
}

// wonBack unblocks the address of a lease that was lost and is held again.
func (ls *Leaser) wonBack(ctx context.Context, n store.Network, ep store.Endpoint, old store.Lease6) {
	a := Lease(old).Addr
	if ls.blocker != nil && a.IsValid() {
		if err := ls.blocker.Unblock(ctx, n.Parent, a, ls.mark); err != nil {
			ls.log.Error("won a lost DHCPv6 lease back, but unblocking the address failed: the container still cannot send from it", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
			return
		}
	}
	ls.log.Info("won a lost IPv6 address back: the container sends from it again", "network", n.ID, "endpoint", ep.ID, "address", a, "lost_for", ls.now().Sub(old.Lost).Round(time.Second))
}

// unblockLost removes the block of a lost lease whose endpoint goes.
func (ls *Leaser) unblockLost(ctx context.Context, n store.Network, ep store.Endpoint) {
	a := Lease(*ep.Lease6).Addr
	if ls.blocker == nil || !a.IsValid() {
		return
	}
	if err := ls.blocker.Unblock(ctx, n.Parent, a, ls.mark); err != nil {
		ls.log.Warn("could not unblock the address of a lost DHCPv6 lease: the next start removes the block", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
	}
}

// stillLost says whether the endpoint's record still holds addr as a lost
// lease; if not (deleted between the record and the block), the block
// just made is removed, under the endpoint's lock: a deletion after this
// check finds the block and removes it itself.
func (ls *Leaser) stillLost(ctx context.Context, k leases.Key, parent, addr string) bool {
	_, unlock, n, ep, err := ls.lockEndpoint(context.WithoutCancel(ctx), k.Network, k.Endpoint)
	if err != nil {
		return true // cannot tell: the block stays, the next start plans it again
	}
	defer unlock()
	if n != nil && ep != nil && ep.Lease6 != nil && ep.Lease6.Addr == addr && !ep.Lease6.Lost.IsZero() {
		return true
	}
	if a, perr := netip.ParseAddr(addr); perr == nil {
		if err := ls.blocker.Unblock(context.WithoutCancel(ctx), parent, a, ls.mark); err != nil {
			ls.log.Warn("could not unblock the address of a DHCPv6 lease whose endpoint went: the next start removes the block", "address", a, "error", err)
		}
	}
	return false
}

func lostAs(l store.Lease6, now time.Time) store.Lease6 {
	if l.Lost.IsZero() {
		l.Lost = now
	}
	return l
}
