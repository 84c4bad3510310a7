package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// host_address: the host reaching its own containers. The kernel passes no
// traffic between a parent and its macvlan/ipvlan children, so the host
// gets a child of its own on the parent (the shim, named ulh + 12
// characters of the network ID) with its address on the network, and a /32
// route to every joined endpoint through it. Both are state: re-made at
// start and by the repair watcher, removed with the network.

// shimSpec is the shim's link: a child of the network's type and mode.
func (d *Driver) shimSpec(n store.Network) netlinkutil.Endpoint {
	return netlinkutil.Endpoint{Name: rules.ShimName(n.ID), Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag, MTU: n.MTU, Mark: d.mark}
}

// ensureShim makes the network's host link healthy if it has a host
// address: made when missing (replacing a link of its name that carries no
// mark, and deleting a copy an operator renamed, so a network has one),
// healed when down, without its address or with another MTU; then its
// routes to the joined endpoints. The caller holds the parent's lock.
func (d *Driver) ensureShim(ctx context.Context, n store.Network, routes []netip.Addr) error {
	if n.HostAddress == "" {
		return nil
	}
	addr, perr := netip.ParseAddr(n.HostAddress)
	if perr != nil {
		return fmt.Errorf("%w: network %s has host address %q", store.ErrCorrupt, dockerid.Short(n.ID), n.HostAddress)
	}
	name := rules.ShimName(n.ID)
	l, err := d.links.Get(ctx, name)
	switch {
	case err == nil && l.Name == name && l.Alias == d.mark:
		if err := d.healShim(ctx, n, l, addr); err != nil {
			return err
		}
	case err == nil && l.Name == name && l.Alias != "":
		return fmt.Errorf("%w: the host link %s of network %s carries the mark %q of another underlay instance, not %q: remove that link (ip link del %s) or the other instance's network",
			ErrConflict, name, dockerid.Short(n.ID), l.Alias, d.mark, name)
	case err == nil && l.Name != name:
		return fmt.Errorf("%w: %s, the host link name of network %s, is an altname of link %s: remove the altname", ErrConflict, name, dockerid.Short(n.ID), l.Name)
	case err == nil || errors.Is(err, netlinkutil.ErrNotFound):
		if err == nil {
			d.log.Warn("replacing a link of the host link's name that carries no mark (left by a crash while it was made)", "network", n.ID, "link", name)
			if err := d.deleteOwnedLink(ctx, name, true); err != nil {
				return err
			}
		}
		if err := d.deleteRenamedShims(ctx, name, addr); err != nil {
			return err
		}
		if err := d.links.AddShim(ctx, d.shimSpec(n), addr); err != nil {
			return fmt.Errorf("create the host's link %s on %s for network %s: %w", name, n.Parent, dockerid.Short(n.ID), err)
		}
		d.log.Info("host link ready", "network", n.ID, "link", name, "address", n.HostAddress, "parent", n.Parent)
	default:
		return err
	}
	for _, r := range routes {
		if err := d.links.AddHostRoute(ctx, r, name); err != nil {
			return err
		}
	}
	return nil
}

// healShim puts back what an existing host link lost (up, its address,
// its MTU), logging what was wrong once.
func (d *Driver) healShim(ctx context.Context, n store.Network, l netlinkutil.Link, addr netip.Addr) error {
	have, err := d.links.LinkAddrs(ctx, l.Name)
	if err != nil {
		return err
	}
	why := rules.BrokenBy(l, n.MTU, addr, have)
	if why == "" {
		return nil
	}
	if err := d.links.Heal(ctx, l.Name, netlinkutil.Heal{MTU: n.MTU, Addr: addr}); err != nil {
		return fmt.Errorf("put the host link %s of network %s back in order (%s): %w", l.Name, dockerid.Short(n.ID), why, err)
	}
	d.log.Warn("put an owned link back in order", "network", n.ID, "link", l.Name, "was", why)
	return nil
}

// deleteRenamedShims deletes the links of this instance that an operator
// renamed from a host link name (a macvlan or ipvlan link with the mark,
// neither an endpoint's nor a host link's name, carrying the host
// address), before the host link is made again: one per network.
func (d *Driver) deleteRenamedShims(ctx context.Context, name string, addr netip.Addr) error {
	links, err := d.links.List(ctx)
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Alias != d.mark || !netlinkutil.IsEndpointKind(l.Kind) || rules.IsEndpointLinkName(l.Name) || rules.IsShimName(l.Name) {
			continue
		}
		as, err := d.links.LinkAddrs(ctx, l.Name)
		if err != nil || !slices.Contains(as, addr) {
			continue
		}
		d.log.Warn("deleting a renamed copy of a host link", "link", l.Name, "host_link", name, "address", addr)
		if err := d.deleteOwnedLink(ctx, l.Name, false); err != nil {
			return err
		}
	}
	return nil
}

// joinedRoutes lists the IPv4 addresses of a network's endpoints joined
// in this boot: the /32 routes its shim carries.
func (d *Driver) joinedRoutes(tx *store.Tx, networkID string) ([]netip.Addr, error) {
	eps, err := d.joins.endpoints(tx, networkID)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ep := range eps {
		if a, ok := rules.EndpointV4(ep); ok && ep.Sandbox != "" && ep.Boot == d.boot {
			out = append(out, a)
		}
	}
	return out, nil
}

// routeToEndpoint adds (or, with del, removes) the host's /32 route to an
// endpoint of a network with a host address.
func (d *Driver) routeToEndpoint(ctx context.Context, n *store.Network, ep store.Endpoint, del bool) error {
	a, ok := rules.EndpointV4(ep)
	if n == nil || n.HostAddress == "" || !ok {
		return nil
	}
	if del {
		return d.links.DelHostRoute(ctx, a, rules.ShimName(n.ID))
	}
	return d.links.AddHostRoute(ctx, a, rules.ShimName(n.ID))
}

// hostRouteFree refuses an endpoint of a network with a host address whose
// IPv4 address an endpoint of another such network has: the host routes
// one address through one host link, so the second would take the first's
// route (and its Leave delete it).
func hostRouteFree(tx *store.Tx, n store.Network, ep store.Endpoint) error {
	a, ok := rules.EndpointV4(ep)
	if n.HostAddress == "" || !ok {
		return nil
	}
	return tx.ForEachNetworkWithHostAddress(func(o store.Network) error {
		if o.ID == n.ID || o.HostAddress == "" {
			return nil
		}
		eps, err := tx.Endpoints(o.ID)
		if err != nil {
			return err
		}
		for _, e := range eps {
			if b, ok := rules.EndpointV4(e); ok && b == a {
				return fmt.Errorf("%w: address %s of endpoint %s is already the address of endpoint %s of network %s, which also has a host address (host link %s): the host routes one address through one host link; give this container another address (--ip), or use another subnet",
					ErrConflict, a, dockerid.Short(ep.ID), dockerid.Short(e.ID), dockerid.Short(o.ID), rules.ShimName(o.ID))
			}
		}
		return nil
	})
}
