package netlinkutil

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's addresses and routes, as the IPAM driver needs them to know
// which prefixes are in use on this host.

// Addrs returns every address of every link, both families, in the
// kernel's order (a link's primary address first): it asks the kernel
// (RequestPool and CreateNetwork's parent=auto, not a container's start).
func (k *Kernel) Addrs(ctx context.Context) ([]kernel.Addr, error) {
	return k.readAddrs(ctx)
}

// AddrsNear returns the addresses whose subnet overlaps pool: those in it,
// and those on a LAN that holds it.
func (k *Kernel) AddrsNear(ctx context.Context, pool netip.Prefix) ([]kernel.Addr, error) {
	if s := k.kept.Load(); s != nil {
		if as, err := s.addrsNear(ctx, pool); err == nil {
			return as, nil
		}
	}
	as, err := k.readAddrs(ctx)
	if err != nil {
		return nil, err
	}
	var out []kernel.Addr
	for _, a := range as {
		if a.Prefix.Masked().Overlaps(pool) {
			out = append(out, a)
		}
	}
	return out, nil
}

// readAddrs lists every address of every link from the kernel.
func (k *Kernel) readAddrs(ctx context.Context) ([]kernel.Addr, error) {
	var as []netlink.Addr
	if err := k.retry(ctx, func(h *netlink.Handle) (err error) { as, err = h.AddrList(nil, netlink.FAMILY_ALL); return err }); err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]kernel.Addr, 0, len(as))
	for _, a := range as {
		if p, ok := prefixOf(a.IPNet, false); ok {
			out = append(out, kernel.Addr{Prefix: p, LinkIndex: a.LinkIndex})
		}
	}
	return out, nil
}

// Routes returns the IPv4 and IPv6 routes of every table, in the kernel's
// order: it asks the kernel (RequestPool and CreateNetwork's parent=auto,
// not a container's start).
func (k *Kernel) Routes(ctx context.Context) ([]kernel.Route, error) {
	rs, err := k.readRoutes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Route, 0, len(rs))
	for _, r := range rs {
		_, each := routeOf(r) // one per next hop of a multipath (ECMP) route
		out = append(out, each...)
	}
	return out, nil
}

// readRoutes lists the IPv4 and IPv6 routes of every table (a dump of
// every family would bring multicast and MPLS routes, which are not
// these).
func (k *Kernel) readRoutes(ctx context.Context) ([]netlink.Route, error) {
	var out []netlink.Route
	filter := &netlink.Route{Table: unix.RT_TABLE_UNSPEC}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var rs []netlink.Route
		if err := k.retry(ctx, func(h *netlink.Handle) (err error) {
			rs, err = h.RouteListFiltered(family, filter, netlink.RT_FILTER_TABLE)
			return err
		}); err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// RoutesVia returns the routes (of every table, both families) through the
// link with the index.
func (k *Kernel) RoutesVia(ctx context.Context, index int) ([]kernel.Route, error) {
	if s := k.kept.Load(); s != nil {
		if rs, err := s.routesVia(ctx, index); err == nil {
			return rs, nil
		}
	}
	rs, err := k.Routes(ctx)
	if err != nil {
		return nil, err
	}
	var out []kernel.Route
	for _, r := range rs {
		if r.LinkIndex == index {
			out = append(out, r)
		}
	}
	return out, nil
}

// prefixOf converts a net.IPNet; masked turns an address into its prefix.
func prefixOf(n *net.IPNet, masked bool) (netip.Prefix, bool) {
	if n == nil || n.IP == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if a.Is4() && bits == 128 {
		ones -= 96
	}
	p := netip.PrefixFrom(a, ones)
	if masked {
		p = p.Masked()
	}
	return p, true
}
