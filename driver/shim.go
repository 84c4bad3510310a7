package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// host_address: the host reaching its own containers. The kernel passes no
// traffic between a parent and its macvlan/ipvlan children, so the host
// gets a child of its own on the parent (the shim, named ulh + 12
// characters of the network ID) with its address on the network, and a /32
// route to every joined endpoint through it. Both are state: re-made at
// start and by the repair watcher, removed with the network.

const shimPrefix = "ulh"

// shimName is the host's link on a network.
func shimName(networkID string) string { return shimPrefix + idPart(networkID) }

// isShimName reports whether a name has the form of a host link.
func isShimName(name string) bool {
	return len(name) == len(shimPrefix)+idChars && strings.HasPrefix(name, shimPrefix)
}

// parseHostAddress validates host_address against the network's mode and
// IPv4 pools; "" when it is not given.
func parseHostAddress(o netOptions, v4 []store.Pool, data []*network.IPAMData) (string, error) {
	v, ok := o.Given[OptHostAddress]
	if !ok || v == "" {
		return "", nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is4() {
		return "", invalidf("host_address %q is not an IPv4 address: give the host's address on the network, such as 198.18.1.2", v)
	}
	switch {
	case len(v4) == 0:
		return "", invalidf("host_address=%s needs an IPv4 subnet, and this network has none (IPv6 only, --ipv4=false): host_address6 is not supported yet; drop host_address, or give the network an IPv4 --subnet", a)
	case o.Parent == "":
		return "", invalidf("host_address=%s needs a parent: an internal network has no wire for the host to join", a)
	case o.Type == typeMacvlan && o.Mode != netlinkutil.MacvlanBridge:
		return "", invalidf("host_address=%s needs macvlan_mode=bridge: in %s mode the kernel passes no traffic between the host's link and the containers' on one parent", a, o.Mode)
	case o.Type == typeIpvlan && o.Flag != netlinkutil.IpvlanFlagBridge:
		return "", invalidf("host_address=%s needs ipvlan_flag=bridge: with %s the kernel passes no traffic between the host's link and the containers' on one parent", a, o.Flag)
	}
	for i, p := range v4 {
		sub, err := netip.ParsePrefix(p.Subnet)
		if err != nil || !sub.Contains(a) {
			continue
		}
		if p.Gateway == a.String() {
			return "", invalidf("host_address=%s is the gateway of %s: give the host another address of the subnet, reserved with --aux-address host=ADDR", a, sub)
		}
		if i < len(data) && data[i] != nil && auxHas(data[i].AuxAddresses, a) {
			return a.String(), nil
		}
		return "", invalidf("host_address=%s is not reserved from Docker's IPAM, which would hand it to a container: add --aux-address host=%s to docker network create", a, a)
	}
	return "", invalidf("host_address=%s is in none of the network's IPv4 subnets: give an address of the --subnet, reserved with --aux-address host=ADDR", a)
}

// auxHas reports whether the aux addresses reserve a.
func auxHas(aux map[string]any, a netip.Addr) bool {
	for _, v := range aux {
		if s, ok := v.(string); ok {
			if b, err := parseAddr(s); err == nil && b == a {
				return true
			}
		}
	}
	return false
}

// shimSpec is the shim's link: a child of the network's type and mode.
func (d *Driver) shimSpec(n store.Network) netlinkutil.Endpoint {
	return netlinkutil.Endpoint{Name: shimName(n.ID), Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag, MTU: n.MTU, Mark: d.mark}
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
		return fmt.Errorf("%w: network %s has host address %q", store.ErrCorrupt, short(n.ID), n.HostAddress)
	}
	name := shimName(n.ID)
	l, err := d.links.Get(ctx, name)
	switch {
	case err == nil && l.Name == name && l.Alias == d.mark:
		if err := d.healShim(ctx, n, l, addr); err != nil {
			return err
		}
	case err == nil && l.Name == name && l.Alias != "":
		return fmt.Errorf("%w: the host link %s of network %s carries the mark %q of another underlay instance, not %q: remove that link (ip link del %s) or the other instance's network",
			ErrConflict, name, short(n.ID), l.Alias, d.mark, name)
	case err == nil && l.Name != name:
		return fmt.Errorf("%w: %s, the host link name of network %s, is an altname of link %s: remove the altname", ErrConflict, name, short(n.ID), l.Name)
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
			return fmt.Errorf("create the host's link %s on %s for network %s: %w", name, n.Parent, short(n.ID), err)
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
	why := brokenBy(l, n.MTU, addr, have)
	if why == "" {
		return nil
	}
	if err := d.links.Heal(ctx, l.Name, netlinkutil.Heal{MTU: n.MTU, Addr: addr}); err != nil {
		return fmt.Errorf("put the host link %s of network %s back in order (%s): %w", l.Name, short(n.ID), why, err)
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
		if l.Alias != d.mark || !netlinkutil.IsEndpointKind(l.Kind) || isEndpointLinkName(l.Name) || isShimName(l.Name) {
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
	eps, err := tx.Endpoints(networkID)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ep := range eps {
		if a, ok := endpointV4(ep); ok && ep.Sandbox != "" && ep.Boot == d.boot {
			out = append(out, a)
		}
	}
	return out, nil
}

// endpointV4 is an endpoint's IPv4 address, if it has one.
func endpointV4(ep store.Endpoint) (netip.Addr, bool) {
	p, err := netip.ParsePrefix(ep.IPv4)
	return p.Addr(), err == nil
}

// routeToEndpoint adds (or, with del, removes) the host's /32 route to an
// endpoint of a network with a host address.
func (d *Driver) routeToEndpoint(ctx context.Context, n *store.Network, ep store.Endpoint, del bool) error {
	a, ok := endpointV4(ep)
	if n == nil || n.HostAddress == "" || !ok {
		return nil
	}
	if del {
		return d.links.DelHostRoute(ctx, a, shimName(n.ID))
	}
	return d.links.AddHostRoute(ctx, a, shimName(n.ID))
}

// hostRouteFree refuses an endpoint of a network with a host address whose
// IPv4 address an endpoint of another such network has: the host routes
// one address through one host link, so the second would take the first's
// route (and its Leave delete it).
func hostRouteFree(tx *store.Tx, n store.Network, ep store.Endpoint) error {
	a, ok := endpointV4(ep)
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
			if b, ok := endpointV4(e); ok && b == a {
				return fmt.Errorf("%w: address %s of endpoint %s is already the address of endpoint %s of network %s, which also has a host address (host link %s): the host routes one address through one host link; give this container another address (--ip), or use another subnet",
					ErrConflict, a, short(ep.ID), short(e.ID), short(o.ID), shimName(o.ID))
			}
		}
		return nil
	})
}
