package leases

import (
	"context"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Leases a container no longer holds. A DHCP client whose lease expired,
// or was refused, must stop using the address (RFC 2131 4.4.5), but Docker
// cannot be told a new address (libnetwork#843) and underlay does not
// enter containers: the address is blocked on the parent's egress
// (AddrBlocker: its IPv4 packets and ARP dropped) from the moment the
// lease is lost until the same address is won back, which is asked for,
// and only that one, every lostLeaseRetry. Another address is never taken:
// the container must be restarted to get one.

// AddrBlocker stops what leaves a parent from an address
// (netlinkutil.Kernel). tag is the driver's mark.
type AddrBlocker interface {
	Block(ctx context.Context, parent string, addr netip.Addr, tag string) error
	Unblock(ctx context.Context, parent string, addr netip.Addr, tag string) error
	BlockedAddrs(ctx context.Context, tag string) ([]netlinkutil.Blocked, error)
}

// restoreBlocks makes the kernel's blocks those of the lost leases in the
// state file: after a reboot they are gone, after a crash some may be
// left over.
func (ls *Leaser) restoreBlocks(ctx context.Context, lost []rules.BlockKey) error {
	if ls.blocker == nil {
		return nil
	}
	all, err := ls.blocker.BlockedAddrs(ctx, ls.mark)
	if err != nil {
		if len(lost) == 0 {
			return nil // nothing to block: a kernel without nf_tables is fine
		}
		return err
	}
	var present []rules.BlockKey
	for _, b := range all {
		if b.Tag == ls.mark {
			present = append(present, rules.BlockKey{Parent: b.Parent, Addr: b.Addr})
		}
	}
	add, remove := rules.PlanBlocks(lost, present)
	for _, k := range remove {
		if err := ls.blocker.Unblock(ctx, k.Parent, k.Addr, ls.mark); err != nil {
			return err
		}
		ls.log.Info("unblocked an address no lost lease holds", "parent", k.Parent, "address", k.Addr)
	}
	for _, k := range add {
		if err := ls.blocker.Block(ctx, k.Parent, k.Addr, ls.mark); err != nil {
			return err
		}
		ls.log.Warn("blocked the address of a lost DHCP or DHCPv6 lease again", "parent", k.Parent, "address", k.Addr)
	}
	return nil
}

// blockLost blocks a lost lease's address on the parent, logging the loss
// once.
func (ls *Leaser) blockLost(ctx context.Context, n store.Network, ep store.Endpoint, l store.Lease) {
	a := Addr(l)
	log := ls.log.With("network", n.ID, "endpoint", ep.ID, "address", l.Addr, "why", l.LostWhy)
	if ls.blocker == nil {
		log.Error("DHCP lease lost, and this daemon cannot block the address: the container keeps sending from it; restart the container to get a new address")
		return
	}
	if err := ls.blocker.Block(ctx, n.Parent, a, ls.mark); err != nil {
		log.Error("DHCP lease lost, and blocking the address on the parent failed: the container keeps sending from it; restart the container to get a new address", "parent", n.Parent, "error", err)
		return
	}
	log.Error("DHCP lease lost: the container can no longer send from the address (blocked on the parent) until the server gives it back; restart the container to get a new address", "parent", n.Parent)
}

// wonBack unblocks the address of a lease that was lost and is held again.
func (ls *Leaser) wonBack(ctx context.Context, n store.Network, ep store.Endpoint, old store.Lease) {
	if old.Lost.IsZero() {
		return
	}
	a := Addr(old)
	if ls.blocker != nil {
		if err := ls.blocker.Unblock(ctx, n.Parent, a, ls.mark); err != nil {
			ls.log.Error("won a lost DHCP lease back, but unblocking the address failed", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
			return
		}
	}
	ls.log.Info("won a lost DHCP lease back: the container sends from its address again", "network", n.ID, "endpoint", ep.ID, "address", a, "lost_for", ls.now().Sub(old.Lost).Round(time.Second))
}

// Forget is what deleting an endpoint does with its lease: a held one
// is released; a lost one is not the daemon's to release, and its block
// goes.
func (ls *Leaser) Forget(ctx context.Context, n store.Network, ep store.Endpoint) {
	ls.timers.Drop(Key{n.ID, ep.ID})
	if ep.Lease == nil {
		return
	}
	if ep.Lease.Lost.IsZero() {
		if ls.Release(ctx, n, ep) {
			ls.Unjournal(n, ep)
		}
		return
	}
	if ls.blocker != nil {
		if err := ls.blocker.Unblock(ctx, n.Parent, Addr(*ep.Lease), ls.mark); err != nil {
			ls.log.Warn("could not unblock the address of a lost lease", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr, "error", err)
		}
	}
}
