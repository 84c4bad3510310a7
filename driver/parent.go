package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"golang.org/x/sys/unix"
)

// Parent links: checking the one a network asks for against the kernel,
// creating the VLAN and dummy links underlay owns, and deleting them with
// the last network on them.

// createParentLink creates a parent link underlay owns. The kernel's
// EEXIST is success only when the existing link is exactly the one planned
// (made by a previous attempt of this network): a VLAN with the same ID
// under another name, or another link with the name, is an error naming it.
func (d *Driver) createParentLink(ctx context.Context, p store.ParentLink) error {
	var err error
	switch p.Kind {
	case rules.KindVLAN:
		err = d.links.AddVLAN(ctx, p.Name, p.Base, p.VLAN, p.MTU, d.mark)
	case rules.KindDummy:
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
	if l, ok := rules.FindLink(links, p.Name); ok && rules.IsPlanned(l, p, links, d.mark) {
		return nil
	}
	if p.Kind == rules.KindVLAN {
		b, bok := rules.FindLink(links, p.Base)
		for _, l := range links {
			if !bok || l.Kind != rules.KindVLAN || l.ParentIndex != b.Index || l.VLAN != p.VLAN {
				continue
			}
			if l.Alias == d.mark {
				return errRenamed{vlan: p.VLAN, base: p.Base, from: p.Name, to: l.Name}
			}
			return fmt.Errorf("%w: create VLAN %d on %s as %s: the kernel already has that VLAN as %s, made by someone else (mark %q): use -o parent=%s, or remove %s", ErrConflict, p.VLAN, p.Base, p.Name, l.Name, l.Alias, l.Name, l.Name)
		}
		if _, named := rules.FindLink(links, p.Name); !named && bok {
			return fmt.Errorf("%w: create VLAN %d on %s as %s: the kernel answers that it exists (%w), but no link of this namespace has that name or VLAN %d on %s: a link with that VLAN ID was probably moved into another network namespace (ip link set ... netns NS), where it keeps the ID; move it back (ip -n NS link set ... netns 1) or delete it there",
				ErrConflict, p.VLAN, p.Base, p.Name, err, p.VLAN, p.Base)
		}
	}
	return fmt.Errorf("%w: create %s link %s: a link of that name exists and is not the one planned: remove it or use another parent (%w)", ErrConflict, p.Kind, p.Name, err)
}

// recreateParentLink creates an owned parent link that is missing, first
// re-creating its base when that is an owned VLAN that vanished too (a VLAN
// on a VLAN after a reboot).
func (d *Driver) recreateParentLink(ctx context.Context, p store.ParentLink) error {
	if p.Kind == rules.KindVLAN {
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
// then owning it) when it is missing. An owned VLAN an operator renamed is
// followed: its record and networks move to the new name, which is
// returned (otherwise the network's parent). The caller holds the parent
// lock.
func (d *Driver) ensureParent(ctx context.Context, n store.Network) (string, error) {
	_, err := d.links.Get(ctx, n.Parent)
	if err == nil || !errors.Is(err, netlinkutil.ErrNotFound) {
		return n.Parent, err
	}
	var owned store.ParentLink
	var ok bool
	if err := d.store.View(func(tx *store.Tx) (err error) {
		owned, ok, err = tx.ParentLink(n.Parent)
		return err
	}); err != nil {
		return n.Parent, err
	}
	if !ok {
		// A link underlay did not create is gone: if the network asked for
		// a VLAN by IFACE.VID and it resolves to this very name, create it
		// and own it from now on; otherwise say what is missing.
		res, err := d.resolve(ctx, n)
		if err != nil {
			return n.Parent, fmt.Errorf("parent %s of network %s is gone: %w", n.Parent, dockerid.Short(n.ID), err)
		}
		if res.Name != n.Parent {
			return n.Parent, rules.Invalidf("parent %s of network %s is gone, and its parent option %q now means link %s: re-create the network (docker network rm, then create)", n.Parent, dockerid.Short(n.ID), rules.RequestedParent(n), res.Name)
		}
		if res.Create == nil {
			return n.Parent, nil
		}
		owned = *res.Create
		if err := d.store.Update(func(tx *store.Tx) error { return tx.PutParentLink(owned) }); err != nil {
			return n.Parent, err
		}
		if err := d.recreateParentLink(ctx, owned); err != nil {
			// Not made here: not ours to own.
			_ = d.store.Update(func(tx *store.Tx) error { return tx.DeleteParentLink(owned.Name) })
			return n.Parent, fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, dockerid.Short(n.ID), err)
		}
		return n.Parent, nil
	}
	err = d.recreateParentLink(ctx, owned)
	if to, renamed := renamedTo(err); renamed {
		if ferr := d.follow(ctx, n.Parent, to, n.Parent); ferr != nil {
			return n.Parent, fmt.Errorf("parent %s of network %s was renamed to %s, and its record could not follow: %w", n.Parent, dockerid.Short(n.ID), to, ferr)
		}
		return to, nil
	}
	if err != nil {
		return n.Parent, fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, dockerid.Short(n.ID), err)
	}
	return n.Parent, nil
}
