package driver

import (
	"context"
	"time"
)

// Reconciling the state with the kernel, at start, every janitor tick and
// on every link event that may call for a repair: carrying out the
// planners' steps is driver/internal/reconcile's.

// Restore reconciles the store with the kernel before the socket is
// served, as one plan (driver/internal/plan plan.go) over one snapshot of the store and one list
// of links. Only one process can hold the state file, so every pending
// reservation found here belongs to a process that died: each is rolled
// back with its partial kernel state. Parent links underlay created that
// vanished (a reboot) are re-created, those no network uses are deleted,
// and links carrying this state file's mark that no record owns are
// deleted. Links of other owners (another underlay instance's mark, or no
// mark and no record) are never touched.
func (d *Driver) Restore(ctx context.Context) error {
	return d.reconcile.Restore(ctx)
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
					d.reconcile.JanitorTick(context.Background())
				}
			}
		}()
	})
}

// Watch repairs owned links as they go away, until ctx ends: it is started
// after Restore and runs beside the janitor. A subscription that ends (a
// socket overrun loses events) is made again after a second, followed by a
// repair pass for what was missed.
func (d *Driver) Watch(ctx context.Context) error {
	return d.reconcile.Watch(ctx)
}
