package netlinkutil

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/netlinkutil/vocab"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's addresses and routes, as the IPAM driver needs them to know
// which prefixes are in use on this host.

// Addr is an address on a link, with its prefix length (package vocab).
type Addr = vocab.Addr

// Route is a route of any of the host's routing tables (package vocab).
type Route = vocab.Route

// MainTable is the routing table ordinary routes live in (RT_TABLE_MAIN).
const MainTable = vocab.MainTable

// Addrs returns every address of every link, both families.
func (k *Kernel) Addrs(ctx context.Context) ([]Addr, error) {
	var as []netlink.Addr
	if err := k.retry(ctx, func(h *netlink.Handle) (err error) { as, err = h.AddrList(nil, netlink.FAMILY_ALL); return err }); err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]Addr, 0, len(as))
	for _, a := range as {
		if p, ok := prefixOf(a.IPNet, false); ok {
			out = append(out, Addr{Prefix: p, LinkIndex: a.LinkIndex})
		}
	}
	return out, nil
}

// Routes returns the routes of every table, both families.
func (k *Kernel) Routes(ctx context.Context) ([]Route, error) {
	var rs []netlink.Route
	filter := &netlink.Route{Table: unix.RT_TABLE_UNSPEC}
	if err := k.retry(ctx, func(h *netlink.Handle) (err error) {
		rs, err = h.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE)
		return err
	}); err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		dst, ok := prefixOf(r.Dst, true)
		if !ok {
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if r.Family == unix.AF_INET6 {
				dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
		}
		gw, _ := netip.AddrFromSlice(r.Gw)
		if len(r.MultiPath) == 0 {
			out = append(out, Route{Dst: dst, Gateway: gw.Unmap(), LinkIndex: r.LinkIndex, Table: r.Table, Priority: r.Priority})
			continue
		}
		// A multipath (ECMP) route: one route per next hop, each on its link.
		for _, nh := range r.MultiPath {
			gw, _ := netip.AddrFromSlice(nh.Gw)
			out = append(out, Route{Dst: dst, Gateway: gw.Unmap(), LinkIndex: nh.LinkIndex, Table: r.Table, Priority: r.Priority})
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
