package links

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Parent links: re-creating the VLAN and dummy links underlay owns when
// they are missing (creating one is Maker's).

// Recreate creates an owned parent link that is missing, first
// re-creating its base when that is an owned VLAN that vanished too (a VLAN
// on a VLAN after a reboot).
func (o *Owned) Recreate(ctx context.Context, p record.ParentLink) error {
	if p.Kind == kernel.KindVLAN {
		if _, err := o.Kernel.Get(ctx, p.Base); errors.Is(err, netlinkutil.ErrNotFound) {
			var base record.ParentLink
			var owned bool
			if err := o.Store.View(func(tx *store.Tx) (err error) {
				base, owned, err = tx.ParentLink(p.Base)
				return err
			}); err != nil {
				return err
			}
			if owned {
				if err := o.Recreate(ctx, base); err != nil {
					return err
				}
			}
		}
	}
	o.Log.Info("re-creating missing parent link underlay created", "parent", p.Name, "kind", p.Kind)
	return o.Parents.Create(ctx, p)
}

// Ensure makes sure a stored network's parent exists, re-creating a
// VLAN or dummy link underlay owns (or, for a VLAN parent, creating and
// then owning it) when it is missing. An owned VLAN an operator renamed is
// followed: its record and networks move to the new name, which is
// returned (otherwise the network's parent). The caller holds the parent
// lock.
func (o *Owned) Ensure(ctx context.Context, n record.Network) (string, error) {
	_, err := o.Kernel.Get(ctx, n.Parent)
	if err == nil || !errors.Is(err, netlinkutil.ErrNotFound) {
		return n.Parent, err
	}
	var owned record.ParentLink
	var ok bool
	if err := o.Store.View(func(tx *store.Tx) (err error) {
		owned, ok, err = tx.ParentLink(n.Parent)
		return err
	}); err != nil {
		return n.Parent, err
	}
	if !ok {
		// A link underlay did not create is gone: if the network asked for
		// a VLAN by IFACE.VID and it resolves to this very name, create it
		// and own it from now on; otherwise say what is missing.
		res, err := o.Resolver.Resolve(ctx, n)
		if err != nil {
			return n.Parent, fmt.Errorf("parent %s of network %s is gone: %w", n.Parent, dockerid.Short(n.ID), err)
		}
		if res.Name != n.Parent {
			return n.Parent, config.Invalidf("parent %s of network %s is gone, and its parent option %q now means link %s: re-create the network (docker network rm, then create)", n.Parent, dockerid.Short(n.ID), plan.RequestedParent(n), res.Name)
		}
		if res.Create == nil {
			return n.Parent, nil
		}
		owned = *res.Create
		if err := o.Store.Update(func(tx *store.Tx) error { return tx.PutParentLink(owned) }); err != nil {
			return n.Parent, err
		}
		if err := o.Recreate(ctx, owned); err != nil {
			// Not made here: not ours to own.
			_ = o.Store.Update(func(tx *store.Tx) error { return tx.DeleteParentLink(owned.Name) })
			return n.Parent, fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, dockerid.Short(n.ID), err)
		}
		return n.Parent, nil
	}
	err = o.Recreate(ctx, owned)
	if to, renamed := RenamedTo(err); renamed {
		if ferr := o.Follow(ctx, n.Parent, to, n.Parent); ferr != nil {
			return n.Parent, fmt.Errorf("parent %s of network %s was renamed to %s, and its record could not follow: %w", n.Parent, dockerid.Short(n.ID), to, ferr)
		}
		return to, nil
	}
	if err != nil {
		return n.Parent, fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, dockerid.Short(n.ID), err)
	}
	return n.Parent, nil
}
