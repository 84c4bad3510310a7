package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"golang.org/x/sys/unix"
)

// Join creates the endpoint's macvlan or ipvlan link on the parent, in the
// host namespace; libnetwork moves it into the container. The endpoint
// record remembers the sandbox until Leave: a second Join while the link is
// away in a sandbox is refused, since a second link would carry the same
// MAC on the same wire.
func (d *Driver) Join(ctx context.Context, req *network.JoinRequest) (*network.JoinResponse, error) {
	unlock, n, ep, err := d.lockEndpoint(ctx, req.NetworkID, req.EndpointID)
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
	if cur := d.joins.overlay(*ep); cur.Sandbox != "" && cur.Boot == d.boot {
		if _, err := d.links.Get(ctx, ep.Link); errors.Is(err, netlinkutil.ErrNotFound) {
			return nil, fmt.Errorf("%w: endpoint %s is already joined to sandbox %s and its link %s is in that sandbox: a second link would carry the same MAC; leave it first (docker network disconnect)",
				ErrConflict, short(ep.ID), cur.Sandbox, ep.Link)
		} else if err != nil {
			return nil, err
		}
	}
	spec := netlinkutil.Endpoint{Name: ep.Link, Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag, MTU: n.MTU, MAC: ep.MAC, Mark: d.mark}
	d.point("join/before-link")
	if err := d.addEndpointLink(ctx, *n, spec); err != nil {
		return nil, fmt.Errorf("join endpoint %s to network %s: %w", short(ep.ID), short(n.ID), err)
	}
	d.point("join/after-link")
	sandbox := valueOr(req.SandboxKey, "(unnamed)")
	if !durableJoin(*n) && ep.Sandbox == "" {
		d.joins.set(ep.ID, sandbox, d.boot) // joins.go: nothing to commit
	} else if ep.Sandbox != sandbox || ep.Boot != d.boot {
		joined := *ep
		joined.Sandbox, joined.Boot = sandbox, d.boot
		if err := d.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(joined) }); err != nil {
			_ = d.deleteOwnedLink(context.WithoutCancel(ctx), ep.Link, true)
			return nil, fmt.Errorf("join endpoint %s: record the join: %w", short(ep.ID), err)
		}
	}
	if err := d.routeToEndpoint(ctx, n, *ep, false); err != nil {
		// The host's link went missing: make it again, with this route.
		unlockParent, lerr := d.locks.acquire(ctx, exclusive(parentLock(n.Parent)))
		if lerr != nil {
			return nil, lerr
		}
		var routes []netip.Addr // every joined endpoint's, this one's included
		if err = d.store.View(func(tx *store.Tx) (err error) {
			routes, err = d.joinedRoutes(tx, n.ID)
			return err
		}); err == nil {
			err = d.ensureShim(ctx, *n, routes)
		}
		unlockParent()
		if err != nil {
			return nil, fmt.Errorf("join endpoint %s: the host's route to it: %w", short(ep.ID), err)
		}
	}
	d.log.Debug("joined endpoint", "network", n.ID, "endpoint", ep.ID, "link", ep.Link, "sandbox", req.SandboxKey)
	return joinResponse(*n, *ep), nil
}

// addEndpointLink creates the link, replacing a leftover of an earlier
// attempt and re-creating a parent link underlay owns if it vanished.
func (d *Driver) addEndpointLink(ctx context.Context, n store.Network, spec netlinkutil.Endpoint) error {
	err := d.links.AddEndpoint(ctx, spec)
	if errors.Is(err, unix.EEXIST) {
		// A link of this name left in the host namespace by an earlier
		// Join that Docker never saw answered.
		if err := d.deleteOwnedLink(ctx, spec.Name, true); err != nil {
			return err
		}
		err = d.links.AddEndpoint(ctx, spec)
	}
	if !errors.Is(err, netlinkutil.ErrNotFound) {
		return err
	}
	unlockParent, lerr := d.locks.acquire(ctx, exclusive(parentLock(n.Parent)))
	if lerr != nil {
		return lerr
	}
	defer unlockParent()
	if perr := d.ensureParent(ctx, n); perr != nil {
		return fmt.Errorf("%w; and its parent could not be restored: %w", err, perr)
	}
	return d.links.AddEndpoint(ctx, spec)
}

// joinResponse tells libnetwork what to do with the link: its gateways for
// macvlan and ipvlan l2, connected default routes for ipvlan l3/l3s, none
// for internal networks.
func joinResponse(n store.Network, ep store.Endpoint) *network.JoinResponse {
	resp := &network.JoinResponse{
		InterfaceName:         network.InterfaceName{SrcName: ep.Link, DstPrefix: "eth"},
		DisableGatewayService: true,
	}
	if n.Internal {
		return resp
	}
	if ep.Lease != nil {
		leaseJoin(resp, ep.Lease)
		return resp
	}
	if n.Type == typeIpvlan && n.Mode != "l2" {
		if ep.IPv4 != "" {
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: "0.0.0.0/0", RouteType: 1})
		}
		if ep.IPv6 != "" {
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: "::/0", RouteType: 1})
		}
		return resp
	}
	resp.Gateway = gatewayFor(ep.IPv4, n.IPv4)
	resp.GatewayIPv6 = gatewayFor(ep.IPv6, n.IPv6)
	return resp
}

// gatewayFor returns the gateway of the pool holding addr; none when the
// endpoint has no address of that family (a default route through a
// gateway it cannot reach would fail the container).
func gatewayFor(addr string, pools []store.Pool) string {
	a, err := netip.ParsePrefix(addr)
	if err != nil {
		return ""
	}
	for _, p := range pools {
		sub, perr := netip.ParsePrefix(p.Subnet)
		if perr == nil && p.Gateway != "" && sub.Contains(a.Addr()) {
			return p.Gateway
		}
	}
	return ""
}
