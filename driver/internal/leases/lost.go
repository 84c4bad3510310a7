package leases

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Leases a container no longer holds. A DHCP client whose lease expired,
// or was refused, must stop using the address (RFC 2131 4.4.5; for
// DHCPv6, RFC 8415 18.2.10.1), but Docker cannot be told a new address
// (libnetwork#843) and underlay does not enter containers: the address is
// blocked on the parent's egress (AddrBlocker: its IPv4 packets and ARP,
// or its IPv6 packets, dropped) from the moment the lease is lost until
// the same address is won back, which is asked for, and only that one,
// every lostLeaseRetry. Another address is never taken: the container
// must be restarted to get one. The blocks of lost leases of both
// families are restored at start (Leases.Run, plan.LostBlocks).

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
// file want (plan.LostBlocks).
func (ls *Leaser[L, R]) lostBlocks() ([]plan.BlockKey, error) {
	var lost []plan.BlockKey
	err := ls.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error {
			if !n.Config.DHCP.Leases() && !config.Leases6(n.Config) {
				return nil
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				lost = append(lost, plan.LostBlocks(n, ep)...)
			}
			return err
		})
	})
	return lost, err
}

// parentsOf lists the parents of blocks, once each.
func parentsOf(keys []plan.BlockKey) []string {
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
func (ls *Leaser[L, R]) restoreBlocks(ctx context.Context) error {
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
func (ls *Leaser[L, R]) restoreBlocksLocked(ctx context.Context, lost []plan.BlockKey) error {
	all, err := ls.blocker.BlockedAddrs(ctx, ls.mark)
	if err != nil {
		if len(lost) == 0 {
			return nil // nothing to block: a kernel without nf_tables is fine
		}
		return err
	}
	var present []plan.BlockKey
	for _, b := range all {
		if b.Tag == ls.mark {
			present = append(present, plan.BlockKey{Parent: b.Parent, Addr: b.Addr})
		}
	}
	add, remove := plan.PlanBlocks(lost, present)
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
// once; a block made after the endpoint's deletion (which found none to
// remove) is removed again (stillLost).
func (ls *Leaser[L, R]) blockLost(ctx context.Context, k Key, n record.Network, ep record.Endpoint, l L) {
	f, w := ls.Family, ls.Family.Words()
	a := f.Facts(l).Addr
	log := ls.log.With("network", n.ID, "endpoint", ep.ID, "address", f.Facts(l).Text, "why", f.Facts(l).LostWhy)
	switch {
	case ls.blocker == nil:
		log.Error(w.Lost + ", and this daemon cannot block the address: the container keeps sending from it; restart the container to get a new address")
		return
	case !a.IsValid():
		log.Error(w.Lost + " whose recorded address is not an address: it cannot be blocked; restart the container to get a new address")
		return
	}
	parent, err := BlockOnParent(ctx, ls.store, ls.blocker, ls.lockParents, n.ID, a, ls.mark)
	switch {
	case err != nil:
		log.Error(w.Lost+", and blocking the address on the parent failed: the container keeps sending from it; restart the container to get a new address", "parent", n.Parent, "error", err)
	case parent == "":
		log.Info(w.Lost + " as its network went: nothing to block")
	case ls.stillLost(ctx, k, parent, l):
		log.Error(w.Lost+": the container can no longer send from the address (blocked on the parent) until the server gives it back; "+w.LostAsk+"restart the container to get a new address", "parent", parent)
	}
}

// stillLost says whether the endpoint's record still holds l as a lost
// lease; if not (deleted between the record and the block), the block
// just made is removed, under the endpoint's lock: a deletion after this
// check finds the block and removes it itself.
func (ls *Leaser[L, R]) stillLost(ctx context.Context, k Key, parent string, l L) bool {
	f := ls.Family
	_, unlock, n, ep, err := ls.lockEndpoint(context.WithoutCancel(ctx), k.Network, k.Endpoint)
	if err != nil {
		return true // cannot tell: the block stays, the next start plans it again
	}
	defer unlock()
	if n != nil && ep != nil {
		if held := f.Of(*ep); held != nil && f.Facts(*held).Text == f.Facts(l).Text && !f.Facts(*held).Lost.IsZero() {
			return true
		}
	}
	if err := ls.blocker.Unblock(context.WithoutCancel(ctx), parent, f.Facts(l).Addr, ls.mark); err != nil {
		ls.log.Warn("could not unblock the address of a "+f.Words().Name+" lease whose endpoint went: the next start removes the block", "address", f.Facts(l).Addr, "error", err)
	}
	return false
}

// wonBack unblocks the address of a lease that was lost and is held again.
func (ls *Leaser[L, R]) wonBack(ctx context.Context, n record.Network, ep record.Endpoint, old L) {
	f, w := ls.Family, ls.Family.Words()
	a := f.Facts(old).Addr
	if ls.blocker != nil && a.IsValid() {
		if err := ls.blocker.Unblock(ctx, n.Parent, a, ls.mark); err != nil {
			ls.log.Error("won a lost "+w.Name+" lease back, but unblocking the address failed: the container still cannot send from it", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
			return
		}
	}
	ls.log.Info(w.WonBack, "network", n.ID, "endpoint", ep.ID, "address", a, "lost_for", ls.now().Sub(f.Facts(old).Lost).Round(time.Second))
}

// unblock removes the block of a lost lease whose endpoint goes.
func (ls *Leaser[L, R]) unblock(ctx context.Context, n record.Network, ep record.Endpoint, l L) {
	a := ls.Family.Facts(l).Addr
	if ls.blocker == nil || !a.IsValid() {
		return
	}
	if err := ls.blocker.Unblock(ctx, n.Parent, a, ls.mark); err != nil {
		ls.log.Warn("could not unblock the address of a lost "+ls.Family.Words().Name+" lease: the next start removes the block", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
	}
}
