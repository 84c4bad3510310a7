package reconcile

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The steps that make, heal or release a link, each under its parent's
// lock (tried unless held), each re-checking the store under it: the plan
// was made from a snapshot.

// recreate makes a missing parent link underlay owns, under its lock
// (tried unless held), if a network still needs it.
func (x *Executor) recreate(ctx context.Context, s plan.Step, held string) error {
	unlock, err := x.Owned.TryParent(s.Name, held)
	if err != nil {
		return err
	}
	defer unlock()
	var still bool
	if err := x.Store.View(func(tx *store.Tx) error {
		_, ok, err := tx.ParentLink(s.Name)
		still = ok && links.Needed(tx, s.Name)
		return err
	}); err != nil || !still {
		return err
	}
	x.Log.Warn("re-creating missing parent link underlay created", "link", s.Name, "kind", s.Parent.Kind, "why", s.Why)
	return x.Parents.Create(ctx, s.Parent)
}

// release deletes (opRelease) or only forgets (opForget) an owned parent
// link, under its lock, if the store still says nothing needs it.
func (x *Executor) release(ctx context.Context, s plan.Step, held string) error {
	unlock, err := x.Owned.TryParent(s.Name, held)
	if err != nil {
		return err
	}
	defer unlock()
	var still bool
	if err := x.Store.View(func(tx *store.Tx) error {
		_, ok, err := tx.ParentLink(s.Name)
		still = ok && !links.Needed(tx, s.Name)
		return err
	}); err != nil || !still {
		return err
	}
	if s.Op == plan.OpRelease {
		if err := x.Owned.Delete(ctx, s.Name, true); err != nil {
			return fmt.Errorf("delete parent link %s: %w", s.Name, err)
		}
		x.Log.Info("deleted parent link underlay created", "parent", s.Name)
	} else {
		x.Log.Info("forgetting parent link underlay created", "parent", s.Name, "why", s.Why)
	}
	return x.Store.Update(func(tx *store.Tx) error {
		if links.Needed(tx, s.Name) {
			return nil
		}
		return tx.DeleteParentLink(s.Name)
	})
}

// heal carries out opHeal (an owned parent or a host link) and opFollow,
// under the locks of the links involved (tried unless held).
func (x *Executor) heal(ctx context.Context, s plan.Step, held string) error {
	switch {
	case s.Op == plan.OpFollow:
		return x.Owned.Follow(ctx, s.Name, s.To, held)
	case s.Shim.Network.ID != "":
		return x.repairShim(ctx, s, held) // links.Shims.Ensure logs what it healed
	default:
		unlock, err := x.Owned.TryParent(s.Name, held)
		if err != nil {
			return err
		}
		defer unlock()
		var p record.ParentLink
		var still bool
		if err := x.Store.View(func(tx *store.Tx) (err error) {
			p, still, err = tx.ParentLink(s.Name)
			still = still && links.Needed(tx, s.Name)
			return err
		}); err != nil || !still {
			return err
		}
		if err := x.Kernel.Heal(ctx, s.Name, netlinkutil.Heal{MTU: p.MTU}); err != nil {
			return err
		}
	}
	x.Log.Warn("put an owned link back in order", "link", s.Name, "was", s.Why)
	return nil
}

// repairShim makes a host link (opShim) or puts its routes back (opRoutes)
// under the network's parent lock, tried unless held.
func (x *Executor) repairShim(ctx context.Context, s plan.Step, held string) error {
	n := s.Shim.Network
	unlock, err := x.Owned.TryParent(n.Parent, held)
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock, the store says what is true now: the network may
	// have gone, and the routes are read again (Leave removes a route and
	// commits under this lock).
	var routes []netip.Addr
	var cur *record.Network
	if err := x.Store.View(func(tx *store.Tx) error {
		nv, ok, err := tx.Network(n.ID)
		if err != nil || !ok {
			return err
		}
		cur = &nv
		routes, err = x.Joins.JoinedV4(tx, n.ID, x.Boot)
		return err
	}); err != nil || cur == nil || cur.HostAddress != n.HostAddress || cur.Parent != n.Parent {
		return err // the network went away or changed meanwhile
	}
	return x.Shims.Ensure(ctx, *cur, routes)
}
