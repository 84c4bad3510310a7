package ipam

import (
	"context"
	"net/netip"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// Pools of a parent (--ipam-opt parent=): the link it names and its LAN.

// resolveParent resolves a request's --ipam-opt parent to its kernel link
// over one list of the host's links (by name or altname). A parent no link
// has is refused in the local space; in the global space (swarm's, where
// the manager's allocator may not have the nodes' interfaces) it is kept
// as given. The loopback interface has no LAN.
func (m *IPAM) resolveParent(ctx context.Context, req poolRequest) (parentRef, error) {
	ref := parentRef{Asked: req.Parent}
	if req.Parent == "" {
		return ref, nil
	}
	links, err := m.host.List(ctx)
	if err != nil {
		return parentRef{}, err
	}
	ref.links = links
	ref.Link, ref.Found = kernel.FindLink(links, req.Parent)
	switch {
	case !ref.Found && req.Space != GlobalSpace:
		return parentRef{}, invalidf("--ipam-opt parent=%s: no such interface on this host (no link has that name or altname): name the interface whose LAN the network is on (ip link shows them), or drop --ipam-opt parent", req.Parent)
	case ref.Found && loopback(ref.Link):
		return parentRef{}, invalidf("--ipam-opt parent=%s: %s is the loopback interface, which is on no LAN (its addresses, 127.0.0.0/8, never leave the host): name the interface whose LAN the network is on, such as eth0", req.Parent, ref.Link.Name)
	}
	return ref, nil
}

// parentLAN is a parent's connected IPv4 prefix and the gateway of the
// default route through it, when that gateway is on the prefix. l is the
// parent's link, resolveParent's; a zero l (a parent of the global space
// no link has) has no LAN.
func (m *IPAM) parentLAN(ctx context.Context, parent string, l kernel.Link) (netip.Prefix, netip.Addr, error) {
	if l.Index == 0 {
		return netip.Prefix{}, netip.Addr{}, invalidf("--ipam-opt parent=%s: no such interface on this host: name the interface whose LAN the network is on", parent)
	}
	addrs, err := m.host.Addrs(ctx)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, err
	}
	var lan netip.Prefix
	for _, a := range addrs {
		if a.LinkIndex == l.Index && a.Prefix.Addr().Is4() && a.Prefix.Bits() < 32 {
			lan = a.Prefix.Masked()
			break
		}
	}
	if !lan.IsValid() {
		return netip.Prefix{}, netip.Addr{}, invalidf("--ipam-opt parent=%s: %s has no IPv4 address to learn its LAN from: give the network --subnet and --gateway instead", parent, l.Name)
	}
	routes, err := m.host.Routes(ctx)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, err
	}
	for _, r := range routes {
		if r.Default() && r.Table == kernel.MainTable && r.LinkIndex == l.Index && r.Gateway.IsValid() && lan.Contains(r.Gateway) {
			return lan, r.Gateway, nil
		}
	}
	return lan, netip.Addr{}, nil
}
