package reconcile

import (
	"context"

	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Releasing a network's parent link, and undoing a reservation: a failed
// create's, an expired one's, a dead process's.

// ReleaseParent deletes the parent link underlay created for a network
// once nothing needs it (and its base, likewise). The caller holds the
// parent's lock; the others are only tried.
func (x *Executor) ReleaseParent(ctx context.Context, name string) error {
	s, err := x.Snapshot(false)
	if err != nil {
		return err
	}
	if _, ok := s.Owned[name]; !ok {
		return nil
	}
	links, err := x.Kernel.List(ctx)
	if err != nil {
		return err
	}
	_, err = x.Execute(ctx, plan.PlanRelease(s, links, x.Mark, []string{name}), name)
	return err
}

// UndoCreate rolls back a failed create. If this request did not make the
// parent link (the kernel refused, or a link that is not underlay's has the
// name), the ownership its reservation recorded is dropped first, so the
// release never touches someone else's link. If the reservation already
// expired and was rolled back, the parent link this request created after
// that is owned again here so that ReleaseParent deletes it.
func (x *Executor) UndoCreate(ctx context.Context, id, token string, plan *record.ParentLink, created bool) error {
	if !created {
		if err := x.Store.Update(func(tx *store.Tx) error {
			if tx.ParentInUse(plan.Name) && !onlyPending(tx, plan.Name, id) {
				return nil
			}
			for _, up := range tx.ParentLinksOn(plan.Name) {
				if links.Needed(tx, up) {
					return nil
				}
			}
			return tx.DeleteParentLink(plan.Name)
		}); err != nil {
			return err
		}
		return x.rollback(ctx, id, token)
	}
	if err := x.rollback(ctx, id, token); err != nil {
		return err
	}
	if err := x.Store.Update(func(tx *store.Tx) error {
		if _, ok, err := tx.ParentLink(plan.Name); err != nil || ok {
			return err
		}
		return tx.PutParentLink(*plan)
	}); err != nil {
		return err
	}
	return x.ReleaseParent(ctx, plan.Name)
}

// onlyPending reports whether the only network naming parent is id.
func onlyPending(tx *store.Tx, parent, id string) bool {
	ns, err := tx.NetworksOn(parent)
	return err == nil && len(ns) == 1 && ns[0].ID == id
}

// rollback undoes a reservation if it is still the one identified by token
// (any token when token is ""): it deletes the record and then the parent
// link underlay created for it, if nothing else needs it.
func (x *Executor) rollback(ctx context.Context, id, token string) error {
	parent, err := x.DropPending(id, token)
	if err != nil || parent == "" {
		return err
	}
	x.Log.Info("rolled back unfinished network", "network", id, "parent", parent)
	return x.ReleaseParent(ctx, parent)
}

// DropPending deletes a pending network's record if its reservation is
// still the one identified by token (any when ""); it returns the parent
// the record named, "" when nothing was dropped.
func (x *Executor) DropPending(id, token string) (parent string, err error) {
	err = x.Store.Update(func(tx *store.Tx) error {
		n, ok, err := tx.Network(id)
		if err != nil || !ok || n.Pending == nil || (token != "" && n.Pending.Token != token) {
			return err
		}
		parent = n.Parent
		return tx.DeleteNetwork(id)
	})
	return parent, err
}
