package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// A network that comes back (the same ID and options: a swarm node
// re-creating it, Docker replaying a create) on a host where its parent
// option now resolves to another link moves there, unless something of it
// still lives on the old link; a move the new link refuses leaves it where
// it was.

// parentMoved reports whether a network that comes back with the same
// configuration (c.same) must move to another link, and the resolution it
// moves to: its parent option resolves to another link on this host now
// (a per-node option after NICs were renamed, a candidate that appeared, a
// VLAN of the user's that went), and the old link is gone or nothing of
// the network lives on it (keepParent). A resolution that fails is left
// to the reuse path, which says what is missing.
func (c *creation) parentMoved(ctx context.Context) (plan.Resolution, bool, error) {
	d, want, same := c.d, c.want, *c.same
	res, err := d.resolver.Resolve(ctx, want)
	if err != nil || res.Name == same.Parent {
		return res, false, nil
	}
	old, gone := d.links.Get(ctx, same.Parent)
	switch {
	case gone == nil && old.Name == res.Name:
		return res, false, nil // the old name is another name of that link
	case gone != nil && !errors.Is(gone, netlinkutil.ErrNotFound):
		return res, false, gone
	}
	var eps []record.Endpoint
	if err := d.store.View(func(tx *store.Tx) (err error) {
		eps, err = d.joins.Endpoints(tx, same.ID)
		return err
	}); err != nil {
		return res, false, err
	}
	if plan.KeepParent(gone == nil, eps, d.boot) {
		d.log.Warn("the parent option now resolves to another link on this host, but endpoints of the network live on its link: keeping it (docker network rm and create move it)",
			"network", same.ID, "link", same.Parent, "would_be", res.Name, "why", res.Why)
		return res, false, nil
	}
	return res, true, nil
}

// reuse makes a stored network whole again: its parent link and host link.
// The caller holds the network's and the parent's locks.
func (c *creation) reuse(ctx context.Context, n record.Network) error {
	d := c.d
	parent, err := d.owned.Ensure(ctx, n)
	if err != nil {
		return err
	}
	n.Parent = parent
	var routes []netip.Addr
	if err := d.store.View(func(tx *store.Tx) (err error) {
		routes, err = d.joins.JoinedV4(tx, n.ID, d.boot)
		return err
	}); err != nil {
		return err
	}
	return d.shims.Ensure(ctx, n, routes)
}

// stayPut answers a move the new link (to) refused: the network (c.same)
// stays on its old link if that can still carry it (logged), otherwise the
// refusal stands, saying the network was moving. The caller holds the
// network's and both parents' locks.
func (c *creation) stayPut(ctx context.Context, to string, refusal error) error {
	d, same := c.d, *c.same
	if err := c.reuse(ctx, same); err != nil {
		return fmt.Errorf("network %s cannot stay on its link %s (%v), nor move to %s, its parent option's choice on this host now: %w", dockerid.Short(same.ID), same.Parent, err, to, refusal)
	}
	d.log.Warn("the parent option now resolves to another link, which refuses the network: keeping it on its link",
		"network", same.ID, "link", same.Parent, "would_be", to, "refusal", refusal.Error())
	return nil
}
