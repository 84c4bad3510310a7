package reconcile

import (
	"context"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// RemoveNetwork deletes a network's endpoint links, its records, and its
// parent link if underlay owns it and nothing else uses it. The caller
// holds the network's lock exclusively and its parent's lock: DeleteNetwork,
// CreateNetwork removing a stale duplicate, doctor --repair.
func (x *Executor) RemoveNetwork(ctx context.Context, n record.Network) error {
	var eps []record.Endpoint
	if err := x.Store.View(func(tx *store.Tx) (err error) {
		eps, err = tx.Endpoints(n.ID)
		return err
	}); err != nil {
		return err
	}
	x.point("delete-network/before-link-delete")
	for _, ep := range eps {
		if err := x.Owned.Delete(ctx, ep.Link, true); err != nil {
			return fmt.Errorf("delete link %s of endpoint %s: %w", ep.Link, dockerid.Short(ep.ID), err)
		}
	}
	if n.HostAddress != "" {
		if err := x.Owned.Delete(ctx, config.ShimName(n.ID), true); err != nil {
			return fmt.Errorf("delete the host's link %s of network %s: %w", config.ShimName(n.ID), dockerid.Short(n.ID), err)
		}
	}
	x.point("delete-network/after-link-delete")
	x.point("delete-network/before-commit")
	var journal []record.PendingRelease // held leases: released below, or at the next start
	for _, ep := range eps {
		if x.Leases != nil {
			journal = append(journal, x.Leases.Deletion(ctx, n, ep)...)
		}
	}
	if err := x.Store.Batch(func(tx *store.Tx) error {
		for _, r := range journal {
			if err := tx.PutPendingRelease(r); err != nil {
				return err
			}
		}
		return tx.DeleteNetwork(n.ID)
	}); err != nil {
		return err
	}
	x.point("delete-network/after-commit")
	if x.Removed != nil {
		x.Removed(n.ID)
	}
	for _, ep := range eps {
		x.Joins.Drop(ep.ID) // only now: a failed removal keeps its endpoints joined
		if x.IfNames != nil {
			x.IfNames.Set(ep.ID, "")
		}
		if x.LAN != nil {
			x.LAN.StopAnnouncing(ep.ID)
		}
		if x.Leases != nil { // endpoints Docker never deleted: their leases go too
			x.Leases.Forget(context.WithoutCancel(ctx), n, ep)
		}
	}
	x.point("delete-network/before-parent-delete")
	if err := x.ReleaseParent(ctx, n.Parent); err != nil {
		return err
	}
	x.point("delete-network/after-parent-delete")
	return nil
}

// point marks a named crash point (CrashPoint).
func (x *Executor) point(name string) {
	if x.CrashPoint != nil {
		x.CrashPoint(name)
	}
}
