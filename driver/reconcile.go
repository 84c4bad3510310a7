package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Restore reconciles the store with the kernel before the socket is
// served. Only one process can hold the state file, so every pending
// reservation found here belongs to a process that died: each is rolled
// back with its partial kernel state. Parent links underlay created that
// vanished (a reboot) are re-created, those no network uses are deleted,
// and endpoint links in the host namespace that no endpoint record owns
// are deleted. It touches only the records and links it reports.
func (d *Driver) Restore(ctx context.Context) error {
	var pending []store.Network
	var parents []store.ParentLink
	if err := d.store.View(func(tx *store.Tx) (err error) {
		if pending, err = tx.Pending(); err != nil {
			return err
		}
		parents, err = tx.ParentLinks()
		return err
	}); err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	var errs []error
	for _, n := range pending {
		d.log.Warn("rolling back network left half-created by a previous run", "network", n.ID, "parent", n.Parent)
		if err := d.rollback(ctx, n.ID, ""); err != nil {
			errs = append(errs, fmt.Errorf("roll back network %s: %w", short(n.ID), err))
		}
	}
	// In name order a VLAN's base (a prefix of its name) comes first.
	for _, p := range parents {
		var needed bool
		if err := d.store.View(func(tx *store.Tx) error {
			needed = parentNeeded(tx, p.Name)
			return nil
		}); err != nil {
			errs = append(errs, err)
			continue
		}
		if !needed {
			if err := d.releaseParent(ctx, p.Name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, err := d.links.Get(ctx, p.Name); !errors.Is(err, netlinkutil.ErrNotFound) {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := d.recreateParentLink(ctx, p); err != nil {
			// The base interface may be gone; the networks stay, and the
			// next request on them reports it.
			d.log.Error("could not re-create a parent link underlay created", "parent", p.Name, "kind", p.Kind, "error", err)
		}
	}
	if err := d.removeStrayLinks(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reconcile state with the kernel: %w", err)
	}
	return nil
}

// removeStrayLinks deletes host-namespace links with underlay's endpoint
// name form that no endpoint record owns, and dummy links of its internal
// name form that it does not own.
func (d *Driver) removeStrayLinks(ctx context.Context) error {
	links, err := d.links.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		var stray bool
		switch {
		case isEndpointLinkName(l.Name) && (l.Kind == typeMacvlan || l.Kind == typeIpvlan):
			err = d.store.View(func(tx *store.Tx) error {
				_, known, err := tx.EndpointByLink(l.Name)
				stray = !known
				return err
			})
		case isDummyName(l.Name) && l.Kind == kindDummy:
			err = d.store.View(func(tx *store.Tx) error {
				_, owned, err := tx.ParentLink(l.Name)
				stray = !owned
				return err
			})
		default:
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if stray {
			d.log.Warn("deleting link no record owns (left by a crash or a deleted network)", "link", l.Name, "kind", l.Kind)
			if err := d.links.Delete(ctx, l.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RunJanitor rolls back, every interval until Close, the reservations that
// outlived their deadline in this running daemon (a kernel call that hung).
// It takes no locks: the request that made the reservation may still hold
// them, and its commit fails once the reservation is gone.
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
					d.expirePending(context.Background())
				}
			}
		}()
	})
}

// expirePending rolls back every reservation past its deadline.
func (d *Driver) expirePending(ctx context.Context) {
	var pending []store.Network
	if err := d.store.View(func(tx *store.Tx) (err error) {
		pending, err = tx.Pending()
		return err
	}); err != nil {
		d.log.Error("read pending reservations", "error", err)
		return
	}
	now := d.now()
	for _, n := range pending {
		if now.Before(n.Pending.Deadline) {
			continue
		}
		d.log.Warn("pending reservation expired: rolling the network back", "network", n.ID, "parent", n.Parent,
			"deadline", n.Pending.Deadline)
		if err := d.rollback(ctx, n.ID, n.Pending.Token); err != nil {
			d.log.Error("roll back expired reservation", "network", n.ID, "error", err)
		}
	}
}
