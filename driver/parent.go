package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"golang.org/x/sys/unix"
)

// Parent links: checking the one a network asks for against the kernel,
// creating the VLAN and dummy links underlay owns, and deleting them with
// the last network on them.

const (
	kindVLAN  = netlinkutil.KindVLAN
	kindDummy = netlinkutil.KindDummy
)

// createParentLink creates a parent link underlay owns. The kernel's
// EEXIST is success only when the existing link is exactly the one planned
// (made by a previous attempt of this network): a VLAN with the same ID
// under another name, or another link with the name, is an error naming it.
func (d *Driver) createParentLink(ctx context.Context, p store.ParentLink) error {
	var err error
	switch p.Kind {
	case kindVLAN:
		err = d.links.AddVLAN(ctx, p.Name, p.Base, p.VLAN, p.MTU, d.mark)
	case kindDummy:
		err = d.links.AddDummy(ctx, p.Name, p.MTU, d.mark)
	default:
		return fmt.Errorf("parent link %s has unknown kind %q", p.Name, p.Kind)
	}
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	links, lerr := d.links.List(ctx)
	if lerr != nil {
		return fmt.Errorf("%w (and listing links to see which one: %w)", err, lerr)
	}
	if l, ok := findLink(links, p.Name); ok && isPlanned(l, p, links, d.mark) {
		return nil
	}
	if p.Kind == kindVLAN {
		for _, l := range links {
			if b, ok := findLink(links, p.Base); ok && l.Kind == kindVLAN && l.ParentIndex == b.Index && l.VLAN == p.VLAN {
				return fmt.Errorf("%w: create VLAN %d on %s as %s: the kernel already has that VLAN as %s, made by someone else: use -o parent=%s, or remove %s", ErrConflict, p.VLAN, p.Base, p.Name, l.Name, l.Name, l.Name)
			}
		}
	}
	return fmt.Errorf("%w: create %s link %s: a link of that name exists and is not the one planned: remove it or use another parent (%w)", ErrConflict, p.Kind, p.Name, err)
}

// isPlanned reports whether an existing link is exactly the parent link
// planned, made by this instance (a previous attempt): same kind, its mark,
// and for a VLAN the same ID on the same base. A user's link that merely
// looks alike is not adopted.
func isPlanned(l netlinkutil.Link, p store.ParentLink, links []netlinkutil.Link, mark string) bool {
	if l.Name != p.Name || l.Kind != p.Kind || l.Alias != mark {
		return false
	}
	if p.Kind != kindVLAN {
		return true
	}
	b, ok := findLink(links, p.Base)
	return ok && l.ParentIndex == b.Index && l.VLAN == p.VLAN
}

// recreateParentLink creates an owned parent link that is missing, first
// re-creating its base when that is an owned VLAN that vanished too (a VLAN
// on a VLAN after a reboot).
func (d *Driver) recreateParentLink(ctx context.Context, p store.ParentLink) error {
	if p.Kind == kindVLAN {
		if _, err := d.links.Get(ctx, p.Base); errors.Is(err, netlinkutil.ErrNotFound) {
			var base store.ParentLink
			var owned bool
			if err := d.store.View(func(tx *store.Tx) (err error) {
				base, owned, err = tx.ParentLink(p.Base)
				return err
			}); err != nil {
				return err
			}
			if owned {
				if err := d.recreateParentLink(ctx, base); err != nil {
					return err
				}
			}
		}
	}
	d.log.Info("re-creating missing parent link underlay created", "parent", p.Name, "kind", p.Kind)
	return d.createParentLink(ctx, p)
}

// ensureParent makes sure a stored network's parent exists, re-creating a
// VLAN or dummy link underlay owns (or, for a VLAN parent, creating and
// then owning it) when it is missing. The caller holds the parent lock.
func (d *Driver) ensureParent(ctx context.Context, n store.Network) error {
	_, err := d.links.Get(ctx, n.Parent)
	if err == nil || !errors.Is(err, netlinkutil.ErrNotFound) {
		return err
	}
	var owned store.ParentLink
	var ok bool
	if err := d.store.View(func(tx *store.Tx) (err error) {
		owned, ok, err = tx.ParentLink(n.Parent)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		// A link underlay did not create is gone: if the network asked for
		// a VLAN by IFACE.VID and it resolves to this very name, create it
		// and own it from now on; otherwise say what is missing.
		res, err := d.resolve(ctx, n)
		if err != nil {
			return fmt.Errorf("parent %s of network %s is gone: %w", n.Parent, short(n.ID), err)
		}
		if res.Name != n.Parent {
			return invalidf("parent %s of network %s is gone, and its parent option %q now means link %s: re-create the network (docker network rm, then create)", n.Parent, short(n.ID), requestedParent(n), res.Name)
		}
		if res.Create == nil {
			return nil
		}
		owned = *res.Create
		if err := d.store.Update(func(tx *store.Tx) error { return tx.PutParentLink(owned) }); err != nil {
			return err
		}
		if err := d.recreateParentLink(ctx, owned); err != nil {
			// Not made here: not ours to own.
			_ = d.store.Update(func(tx *store.Tx) error { return tx.DeleteParentLink(owned.Name) })
			return fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, short(n.ID), err)
		}
		return nil
	}
	if err := d.recreateParentLink(ctx, owned); err != nil {
		return fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, short(n.ID), err)
	}
	return nil
}
