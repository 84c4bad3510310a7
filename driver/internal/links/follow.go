package links

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
)

// Following an owned VLAN an operator renamed, and moving networks
// recorded on one parent name to another.

// Follow moves the record of the owned VLAN from (renamed by an operator)
// to the link's name to, with the networks recorded on it, the owned
// VLANs standing on it and the blocks of lost leases on it (Blocks), under
// both links' locks (tried unless held). The leasers block an address
// under its network's parent lock, as the store names the parent then
// (leases.BlockOnParent): a block is made before the follow, which moves
// it, or after it, under the new name.
func (o *Owned) Follow(ctx context.Context, from, to, held string) error {
	unlockFrom, err := o.TryParent(from, held)
	if err != nil {
		return err
	}
	defer unlockFrom()
	unlockTo, err := o.TryParent(to, held)
	if err != nil {
		return err
	}
	defer unlockTo()
	l, err := o.Kernel.Get(ctx, to)
	if err != nil || l.Name != to || l.Alias != o.Mark {
		return err // changed again meanwhile: the next pass sees it
	}
	var moved []netip.Addr
	err = o.Store.Update(func(tx *store.Tx) error {
		p, ok, err := tx.ParentLink(from)
		if err != nil || !ok || p.Kind != kernel.KindVLAN || p.VLAN != l.VLAN {
			return err
		}
		if _, taken, err := tx.ParentLink(to); err != nil || taken {
			return err
		}
		for _, up := range tx.ParentLinksOn(from) {
			u, ok, err := tx.ParentLink(up)
			if err != nil {
				return err
			}
			if ok {
				u.Base = to
				if err := tx.PutParentLink(u); err != nil {
					return err
				}
			}
		}
		if err := tx.DeleteParentLink(from); err != nil {
			return err
		}
		p.Name = to
		if err := tx.PutParentLink(p); err != nil {
			return err
		}
		if err := repointTx(tx, from, to); err != nil {
			return err
		}
		// The blocks move inside the transaction: a move that fails
		// leaves the record on from, followed again at the next pass; a
		// commit that fails leaves them on to, where that pass's move
		// (nothing left on from) keeps them.
		if o.Blocks != nil {
			if moved, err = o.Blocks.MoveBlocks(ctx, from, to, o.Mark); err != nil {
				return fmt.Errorf("the blocks of lost leases on it could not move: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("follow VLAN %s renamed to %s: %w", from, to, err)
	}
	o.Log.Warn("an owned VLAN was renamed: its record and networks follow it", "from", from, "to", to)
	if len(moved) > 0 {
		o.Log.Warn("the addresses of lost leases on a renamed owned VLAN stay blocked: their blocks moved to its new name", "from", from, "to", to, "addresses", moved)
	}
	return nil
}

// Repoint moves every network recorded with parent from to the link name
// to, keeping the parent as it was asked in the network's options.
func (o *Owned) Repoint(from, to string) error {
	return o.Store.Update(func(tx *store.Tx) error { return repointTx(tx, from, to) })
}

// repointTx is Repoint inside a transaction.
func repointTx(tx *store.Tx, from, to string) error {
	ns, err := tx.NetworksOn(from)
	if err != nil {
		return err
	}
	for _, n := range ns {
		asked := plan.RequestedParent(n)
		opts := make(map[string]string, len(n.Options)+1)
		for k, v := range n.Options {
			opts[k] = v
		}
		opts[config.OptParent] = asked
		n.Options, n.Parent = opts, to
		if err := tx.PutNetwork(n); err != nil {
			return err
		}
	}
	return nil
}
