package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
)

// Restore reconciles the store with the kernel before the socket is
// served, as one plan (plan.go) over one snapshot of the store and one list
// of links. Only one process can hold the state file, so every pending
// reservation found here belongs to a process that died: each is rolled
// back with its partial kernel state. Parent links underlay created that
// vanished (a reboot) are re-created, those no network uses are deleted,
// and links carrying this state file's mark that no record owns are
// deleted. Links of other owners (another underlay instance's mark, or no
// mark and no record) are never touched.
func (d *Driver) Restore(ctx context.Context) error {
	links, err := d.links.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile state with the kernel: %w", err)
	}
	s, err := d.readSnapshot(true, links...)
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	d.readShimAddrs(ctx, &s, links)
	plan := rules.PlanRestore(s, links, d.mark)
	d.log.Info("reconcile plan", "steps", len(plan), "plan", fmt.Sprint(plan))
	if _, err := d.executeCounted(ctx, plan, "", d.events.ReconcileAction); err != nil {
		return fmt.Errorf("reconcile state with the kernel: %w", err)
	}
	return nil
}

// RunJanitor, every interval until Close, rolls back the reservations that
// outlived their deadline in this running daemon (a kernel call that hung)
// and releases the parent links nothing needs any more.
func (d *Driver) RunJanitor(interval time.Duration) {
	d.janitorOnce.Do(func() {
		go func() {
			defer close(d.stopped)
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-d.stop:
					return
				case <-t.C:
					d.janitorTick(context.Background())
				}
			}
		}()
	})
}

// janitorTick drops expired reservations without taking locks (the request
// that made one may still hold them, and its commit fails once it is gone),
// then releases unneeded parent links under their locks, tried only: a busy
// one waits for the next tick.
func (d *Driver) janitorTick(ctx context.Context) {
	s, err := d.readSnapshot(false)
	if err != nil {
		d.log.Error("janitor: read state", "error", err)
		return
	}
	now := d.now()
	for _, n := range s.Pending {
		if now.Before(n.Pending.Deadline) {
			continue
		}
		d.log.Warn("pending reservation expired: rolling the network back", "network", n.ID, "parent", n.Parent,
			"deadline", n.Pending.Deadline)
		if parent, err := d.dropPending(n.ID, n.Pending.Token); err != nil {
			d.log.Error("roll back expired reservation", "network", n.ID, "error", err)
		} else if parent != "" {
			d.events.ReservationRolledBack("network")
		}
	}
	if len(s.Owned) == 0 {
		return
	}
	if s, err = d.readSnapshot(false); err != nil {
		d.log.Error("janitor: read state", "error", err)
		return
	}
	links, err := d.links.List(ctx)
	if err != nil {
		d.log.Error("janitor: list links", "error", err)
		return
	}
	var owned []string
	for name := range s.Owned {
		owned = append(owned, name)
	}
	if _, err := d.execute(ctx, rules.PlanRelease(s, links, d.mark, owned), ""); err != nil {
		d.log.Error("janitor: release parent links", "error", err)
	}
}
