package reconcile

import (
	"context"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/plan"
)

// Restore carries out the restore plan (plan.PlanRestore) over one
// snapshot of the store and one list of links, before the socket is served
// (driver.Driver.Restore: every pending reservation rolled back, missing
// owned parents re-created, unneeded ones released, this instance's strays
// deleted, other owners' links never touched). Network records of an
// older underlay get their typed configuration first (MigrateConfig).
func (x *Executor) Restore(ctx context.Context) error {
	if n, err := x.MigrateConfig(); err != nil {
		return err
	} else if n > 0 {
		x.Log.Info("typed the options of networks stored by an older underlay", "networks", n)
	}
	links, err := x.Kernel.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile state with the kernel: %w", err)
	}
	s, err := x.Snapshot(true, links...)
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	x.ReadShimAddrs(ctx, &s, links)
	plan := plan.PlanRestore(s, links, x.Mark)
	x.Log.Info("reconcile plan", "steps", len(plan), "plan", fmt.Sprint(plan))
	if _, err := x.ExecuteCounted(ctx, plan, "", x.Events.ReconcileAction); err != nil {
		return fmt.Errorf("reconcile state with the kernel: %w", err)
	}
	return nil
}

// JanitorTick drops expired reservations without taking locks (the request
// that made one may still hold them, and its commit fails once it is gone),
// then releases unneeded parent links under their locks, tried only: a busy
// one waits for the next tick.
func (x *Executor) JanitorTick(ctx context.Context) {
	s, err := x.Snapshot(false)
	if err != nil {
		x.Log.Error("janitor: read state", "error", err)
		return
	}
	now := x.Now()
	for _, n := range s.Pending {
		if now.Before(n.Pending.Deadline) {
			continue
		}
		x.Log.Warn("pending reservation expired: rolling the network back", "network", n.ID, "parent", n.Parent,
			"deadline", n.Pending.Deadline)
		if parent, err := x.DropPending(n.ID, n.Pending.Token); err != nil {
			x.Log.Error("roll back expired reservation", "network", n.ID, "error", err)
		} else if parent != "" {
			x.Events.ReservationRolledBack("network")
		}
	}
	if len(s.Owned) == 0 {
		return
	}
	if s, err = x.Snapshot(false); err != nil {
		x.Log.Error("janitor: read state", "error", err)
		return
	}
	links, err := x.Kernel.List(ctx)
	if err != nil {
		x.Log.Error("janitor: list links", "error", err)
		return
	}
	var owned []string
	for name := range s.Owned {
		owned = append(owned, name)
	}
	if _, err := x.Execute(ctx, plan.PlanRelease(s, links, x.Mark, owned), ""); err != nil {
		x.Log.Error("janitor: release parent links", "error", err)
	}
}
