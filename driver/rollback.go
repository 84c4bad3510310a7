package driver

import (
	"context"

	"github.com/underlay-net/underlay/driver/internal/owned"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
)

// Committing a created network, and undoing one that failed: the
// reservation's rollback, the parent link it may have made, and the IPAM
// pools a committed network confirms.

// commitNetwork writes a complete network and confirms the reservations of
// the pools of underlay's IPAM it names: Docker uses them.
func commitNetwork(tx *store.Tx, n store.Network, refs []rules.IPAMRef) error {
	for _, r := range refs {
		if err := tx.ConfirmIPAMPools(r.Space, r.Pool); err != nil {
			return err
		}
	}
	return tx.PutNetwork(n)
}

// undoCreate rolls back a failed create. If this request did not make the
// parent link (the kernel refused, or a link that is not underlay's has the
// name), the ownership its reservation recorded is dropped first, so the
// release never touches someone else's link. If the reservation already
// expired and was rolled back, the parent link this request created after
// that is owned again here so that releaseParent deletes it.
func (d *Driver) undoCreate(ctx context.Context, id, token string, plan *store.ParentLink, created bool) error {
	if !created {
		if err := d.store.Update(func(tx *store.Tx) error {
			if tx.ParentInUse(plan.Name) && !onlyPending(tx, plan.Name, id) {
				return nil
			}
			for _, up := range tx.ParentLinksOn(plan.Name) {
				if owned.Needed(tx, up) {
					return nil
				}
			}
			return tx.DeleteParentLink(plan.Name)
		}); err != nil {
			return err
		}
		return d.rollback(ctx, id, token)
	}
	if err := d.rollback(ctx, id, token); err != nil {
		return err
	}
	if err := d.store.Update(func(tx *store.Tx) error {
		if _, owned, err := tx.ParentLink(plan.Name); err != nil || owned {
			return err
		}
		return tx.PutParentLink(*plan)
	}); err != nil {
		return err
	}
	return d.releaseParent(ctx, plan.Name)
}

// onlyPending reports whether the only network naming parent is id.
func onlyPending(tx *store.Tx, parent, id string) bool {
	ns, err := tx.NetworksOn(parent)
	return err == nil && len(ns) == 1 && ns[0].ID == id
}

// rollback undoes a reservation if it is still the one identified by token
// (any token when token is ""): it deletes the record and then the parent
// link underlay created for it, if nothing else needs it.
func (d *Driver) rollback(ctx context.Context, id, token string) error {
	parent, err := d.dropPending(id, token)
	if err != nil || parent == "" {
		return err
	}
	d.log.Info("rolled back unfinished network", "network", id, "parent", parent)
	return d.releaseParent(ctx, parent)
}

// dropPending deletes a pending network's record if its reservation is
// still the one identified by token (any when ""); it returns the parent
// the record named, "" when nothing was dropped.
func (d *Driver) dropPending(id, token string) (parent string, err error) {
	err = d.store.Update(func(tx *store.Tx) error {
		n, ok, err := tx.Network(id)
		if err != nil || !ok || n.Pending == nil || (token != "" && n.Pending.Token != token) {
			return err
		}
		parent = n.Parent
		return tx.DeleteNetwork(id)
	})
	return parent, err
}
