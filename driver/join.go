package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
	"golang.org/x/sys/unix"
)

// Join creates the endpoint's macvlan or ipvlan link on the parent, in the
// host namespace; libnetwork moves it into the container. The endpoint
// record remembers the sandbox until Leave: a second Join while the link is
// away in a sandbox is refused, since a second link would carry the same
// MAC on the same wire.
func (d *Driver) Join(ctx context.Context, req *network.JoinRequest) (*plan.JoinResponse, error) {
	ctx, unlock, n, ep, err := d.locks.Endpoint(ctx, d.store, req.NetworkID, req.EndpointID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if n == nil || n.Pending != nil {
		return nil, notFound("network", req.NetworkID)
	}
	if ep == nil {
		return nil, notFound("endpoint", req.EndpointID)
	}
	if cur := d.joins.Overlay(*ep); cur.Sandbox != "" && cur.Boot == d.boot {
		if _, err := d.links.Get(ctx, ep.Link); errors.Is(err, netlinkutil.ErrNotFound) {
			return nil, fmt.Errorf("%w: endpoint %s is already joined to sandbox %s and its link %s is in that sandbox: a second link would carry the same MAC; leave it first (docker network disconnect)",
				pluginapi.ErrConflict, dockerid.Short(ep.ID), cur.Sandbox, ep.Link)
		} else if err != nil {
			return nil, err
		}
	}
	spec := kernel.Endpoint{Name: ep.Link, Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag, MTU: n.MTU, MAC: ep.MAC, Mark: d.mark}
	d.point("join/before-link")
	if err := d.addEndpointLink(ctx, *n, spec); err != nil {
		return nil, fmt.Errorf("join endpoint %s to network %s: %w%s", dockerid.Short(ep.ID), dockerid.Short(n.ID), err, mtuHint(ctx, d.links, *n, err))
	}
	d.point("join/after-link")
	sandbox := config.ValueOr(req.SandboxKey, "(unnamed)")
	if commit := d.joins.Join(*n, *ep, sandbox, d.boot); commit != nil { // driver/internal/joins: kept in memory, or committed
		if err := d.store.Batch(commit); err != nil {
			_ = d.owned.Delete(context.WithoutCancel(ctx), ep.Link, true)
			return nil, fmt.Errorf("join endpoint %s: record the join: %w", dockerid.Short(ep.ID), err)
		}
	}
	if err := d.joinHostRoute(ctx, *n, *ep); err != nil {
		if errors.Is(err, netlinkutil.ErrRouteHeld) {
			d.unjoin(ctx, *n, *ep, sandbox)
		}
		return nil, fmt.Errorf("join endpoint %s: the host's route to it: %w", dockerid.Short(ep.ID), err)
	}
	if ctx.Err() == nil { // Docker still waits for this answer
		d.lan.Announce(ctx, *n, *ep)             // in the background
		d.readInterface(*n, *ep, req.SandboxKey) // in the background (containers.go)
	}
	d.log.Debug("joined endpoint", "network", n.ID, "endpoint", ep.ID, "link", ep.Link, "sandbox", req.SandboxKey)
	resp := plan.JoinAnswer(*n, *ep)
	resp.InterfaceName.DstName = d.ifnames.Get(ep.ID)
	return resp, nil
}

// joinHostRoute routes the host to a joining endpoint of a network with a
// host address. A host link that is missing or broken (down, without its
// address, another MTU: an operator's doing) is made healthy first, under
// the parent's lock, with the routes of every joined endpoint: a Join
// never fails for a state underlay can repair. It does fail when another
// link holds the route to the endpoint's address (netlinkutil.ErrRouteHeld:
// another instance's host link, an operator's route), which stays.
func (d *Driver) joinHostRoute(ctx context.Context, n record.Network, ep record.Endpoint) error {
	if n.HostAddress == "" {
		return nil
	}
	if d.shims.Healthy(ctx, n) {
		err := d.shims.Route(ctx, &n, ep, false)
		if err == nil || errors.Is(err, netlinkutil.ErrRouteHeld) {
			return err
		}
	}
	_, unlockParent, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if err != nil {
		return err
	}
	defer unlockParent()
	var routes []netip.Addr // every joined endpoint's, this one's included
	if err := d.store.View(func(tx *store.Tx) (err error) {
		routes, err = d.joins.JoinedV4(tx, n.ID, d.boot)
		return err
	}); err != nil {
		return err
	}
	// The others' routes (a route another link holds is left, warned of),
	// then this endpoint's (such a route refuses the Join).
	if a, ok := plan.EndpointV4(ep); ok {
		routes = slices.DeleteFunc(routes, func(r netip.Addr) bool { return r == a })
	}
	if err := d.shims.Ensure(ctx, n, routes); err != nil {
		return err
	}
	return d.shims.Route(ctx, &n, ep, false)
}

// unjoin undoes a Join refused for its host route: the join's record
// and the endpoint's link go, under the parent's lock (the repair of the
// host link reads the joins under it), and a route through the host link,
// if one came meanwhile, with them; the route another link holds stays.
// What fails is logged: the refusal is the answer.
func (d *Driver) unjoin(ctx context.Context, n record.Network, ep record.Endpoint, sandbox string) {
	ctx = context.WithoutCancel(ctx)
	log := d.log.With("network", n.ID, "endpoint", ep.ID)
	_, unlockParent, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if err != nil {
		log.Warn("a refused Join could not be undone: its record keeps it joined until Docker deletes the endpoint", "error", err)
		return
	}
	defer unlockParent()
	joined := ep
	joined.Sandbox, joined.Boot = sandbox, d.boot
	if commit := d.joins.Leave(joined); commit != nil {
		if err := d.store.Batch(commit); err != nil {
			log.Warn("a refused Join could not be undone: its record keeps it joined until Docker deletes the endpoint", "error", err)
		}
	}
	if err := d.shims.Route(ctx, &n, ep, true); err != nil {
		log.Warn("a refused Join could not remove the host link's route to it", "error", err)
	}
	if err := d.owned.Delete(ctx, ep.Link, true); err != nil {
		log.Warn("a refused Join could not delete the endpoint's link", "link", ep.Link, "error", err)
	}
}

// addEndpointLink creates the link, replacing a leftover of an earlier
// attempt and re-creating a parent link underlay owns if it vanished.
func (d *Driver) addEndpointLink(ctx context.Context, n record.Network, spec kernel.Endpoint) error {
	err := d.links.AddEndpoint(ctx, spec)
	if errors.Is(err, unix.EEXIST) {
		// A link of this name left in the host namespace by an earlier
		// Join that Docker never saw answered.
		if err := d.owned.Delete(ctx, spec.Name, true); err != nil {
			return err
		}
		err = d.links.AddEndpoint(ctx, spec)
	}
	if !errors.Is(err, netlinkutil.ErrNotFound) {
		return err
	}
	_, unlockParent, lerr := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if lerr != nil {
		return lerr
	}
	defer unlockParent()
	parent, perr := d.owned.Ensure(ctx, n)
	if perr != nil {
		return fmt.Errorf("%w; and its parent could not be restored: %w", err, perr)
	}
	spec.Parent = parent
	return d.links.AddEndpoint(ctx, spec)
}

// mtuHint explains the kernel's EINVAL for an endpoint link whose MTU is
// above its parent's (an operator lowered the parent's MTU after the
// network was created): "" when that is not the cause.
func mtuHint(ctx context.Context, links netlinkutil.Links, n record.Network, err error) string {
	if n.MTU == 0 || !errors.Is(err, unix.EINVAL) {
		return ""
	}
	p, perr := links.Get(ctx, n.Parent)
	if perr != nil || p.MTU >= n.MTU {
		return ""
	}
	return fmt.Sprintf(": the network's MTU %d is above the MTU %d its parent %s has now; set the parent's MTU back (ip link set dev %s mtu %d), or re-create the network with -o mtu=%d or less",
		n.MTU, p.MTU, p.Name, p.Name, n.MTU, p.MTU)
}
