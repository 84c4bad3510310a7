package leases

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
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

// maxParentChanges bounds how often a block waits for its parent's lock
// again because the parent was renamed meanwhile.
const maxParentChanges = 4

// BlockOnParent blocks addr on the parent of network netID under that
// parent's lock (lock; nil: none), as the store names the parent then, and
// returns the parent; "" (nothing blocked) when the network is gone. A
// follow of an owned VLAN an operator renamed holds the same lock while it
// moves the network and the blocks on it to the new name: a block is made
// before it, and moved, or after it, under the new name.
func BlockOnParent(ctx context.Context, st Store, b AddrBlocker, lock LockParents, netID string, addr netip.Addr, tag string) (string, error) {
	parentOf := func() (parent string, err error) {
		err = st.View(func(tx *store.Tx) error {
			n, ok, err := tx.Network(netID)
			if ok {
				parent = n.Parent
			}
			return err
		})
		return parent, err
	}
	for range maxParentChanges {
		parent, err := parentOf()
		if err != nil || parent == "" {
			return "", err
		}
		unlock := func() {}
		if lock != nil {
			if unlock, err = lock(ctx, parent); err != nil {
				return "", fmt.Errorf("block %s on parent %s: %w", addr, parent, err)
			}
		}
		now, err := parentOf()
		if err == nil && (now == parent || lock == nil) {
			err = b.Block(ctx, parent, addr, tag)
			unlock()
			return parent, err
		}
		unlock()
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("block %s: the parent of network %s was renamed %d times while its lock was awaited; not blocked now, the next start blocks it", addr, netID, maxParentChanges)
}

// lostBlocks are the blocks the lost leases of both families in the state
// file want (rules.LostBlocks).
func (ls *Leaser) lostBlocks() ([]rules.BlockKey, error) {
	var lost []rules.BlockKey
	err := ls.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n store.Network) error {
			if !rules.DHCPOf(n).On && rules.IPv6ModeOf(n) != rules.IPv6DHCPv6 {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				lost = append(lost, rules.LostBlocks(n, ep)...)
			}
			return err
		})
	})
	return lost, err
}

// parentsOf lists the parents of blocks, once each.
func parentsOf(keys []rules.BlockKey) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains(out, k.Parent) {
			out = append(out, k.Parent)
		}
	}
	slices.Sort(out)
	return out
}

// restoreBlocks makes the kernel's blocks those of the lost leases in the
// state file (after a reboot they are gone, after a crash some may be
// left over), under the locks of their parents, as the store names them
// then (see BlockOnParent).
func (ls *Leaser) restoreBlocks(ctx context.Context) error {
	if ls.blocker == nil {
		return nil
	}
	for range maxParentChanges {
		lost, err := ls.lostBlocks()
		if err != nil {
			return err
		}
		unlock := func() {}
		if ls.lockParents != nil {
			if unlock, err = ls.lockParents(ctx, parentsOf(lost)...); err != nil {
				return err
			}
		}
		again, err := ls.lostBlocks()
		if err == nil && (ls.lockParents == nil || slices.Equal(parentsOf(again), parentsOf(lost))) {
			err = ls.restoreBlocksLocked(ctx, again)
			unlock()
			return err
		}
		unlock()
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("the parents of lost leases were renamed %d times while their locks were awaited; their blocks are restored at the next start", maxParentChanges)
}

// restoreBlocksLocked is restoreBlocks under the parents' locks.
func (ls *Leaser) restoreBlocksLocked(ctx context.Context, lost []rules.BlockKey) error {
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
	parent, err := BlockOnParent(ctx, ls.store, ls.blocker, ls.lockParents, n.ID, a, ls.mark)
	switch {
	case err != nil:
		log.Error("DHCP lease lost, and blocking the address on the parent failed: the container keeps sending from it; restart the container to get a new address", "parent", n.Parent, "error", err)
	case parent == "":
		log.Info("DHCP lease lost as its network went: nothing to block")
	default:
		log.Error("DHCP lease lost: the container can no longer send from the address (blocked on the parent) until the server gives it back; restart the container to get a new address", "parent", parent)
	}
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
