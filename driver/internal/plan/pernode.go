package plan

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// pickParent chooses the name this node resolves for the network, and
// says why. A plain name is itself.
func pickParent(n record.Network, spec config.ParentSpec, links []kernel.Link, routes []kernel.Route) (name, why string, err error) {
	asked := RequestedParent(n)
	switch {
	case spec.Auto:
		l, why, err := autoLink(n, asked, links, routes)
		if err != nil || spec.VLAN == 0 {
			return l.Name, why, err
		}
		if l.Kind == kernel.KindVLAN {
			if l.VLAN == spec.VLAN {
				return l.Name, why + ", which is VLAN " + strconv.Itoa(spec.VLAN), nil
			}
			// auto picked another VLAN: the VLAN asked for goes on the
			// link under it, not on top of it.
			if lower, ok := LinkByIndex(links, l.ParentIndex); ok {
				l, why = lower, why+", a VLAN of "+lower.Name
			}
		}
		return l.Name + "." + strconv.Itoa(spec.VLAN), why + ", VLAN " + strconv.Itoa(spec.VLAN) + " on it", nil
	case len(spec.Candidates) == 1:
		return spec.Candidates[0], "", nil
	case len(spec.Candidates) > 1:
		for i, c := range spec.Candidates {
			if candidateExists(c, links) {
				return c, fmt.Sprintf("candidate %d of %d, the first that exists on this host", i+1, len(spec.Candidates)), nil
			}
		}
		return "", "", config.Invalidf("none of the parent candidates %s exists on this host (its interfaces: %s): add this host's interface to the list (-o parent=%s,IFACE), or create one of them here", strings.Join(spec.Candidates, ", "), hostLinkNames(links), asked)
	}
	return "", "", nil
}

// candidateExists reports whether a candidate can be a parent here: the
// link exists, or it is IFACE.VID and IFACE exists (underlay creates the
// VLAN).
func candidateExists(name string, links []kernel.Link) bool {
	if _, ok := FindLink(links, name); ok {
		return true
	}
	base, _, ok := kernel.SplitVLAN(name)
	if !ok {
		return false
	}
	_, ok = FindLink(links, base)
	return ok
}

// autoLink is the link auto picks: the link of the most specific
// connected route holding the network's IPv4 subnet, else the link of the
// IPv4 default route with the lowest metric. A route on a macvlan or ipvlan
// link counts for its lower link (that is where the LAN is); two links
// tied is a refusal naming them.
func autoLink(n record.Network, asked string, links []kernel.Link, routes []kernel.Route) (kernel.Link, string, error) {
	subnet := FirstIPv4Subnet(n)
	if subnet.IsValid() {
		best, at := -1, []kernel.Link(nil)
		for _, r := range routes {
			if !r.Connected() || !r.Dst.Addr().Is4() || r.Dst.Bits() > subnet.Bits() || !r.Dst.Contains(subnet.Addr()) {
				continue
			}
			l, ok := uplink(links, r.LinkIndex)
			if !ok {
				continue
			}
			if r.Dst.Bits() > best {
				best, at = r.Dst.Bits(), nil
			}
			if r.Dst.Bits() == best {
				at = appendLink(at, l)
			}
		}
		switch {
		case len(at) == 1:
			return at[0], fmt.Sprintf("its connected route %s holds the subnet %s", netip.PrefixFrom(subnet.Addr(), best).Masked(), subnet), nil
		case len(at) > 1:
			return kernel.Link{}, "", config.Invalidf("parent=%s: the subnet %s is on several links of this host (%s): pass the link with -o parent, or a list of candidates (-o parent=IFACE1,IFACE2), one per node", asked, subnet, linkNames(at))
		}
	}
	best, at := 0, []kernel.Link(nil)
	for _, r := range routes {
		if !r.Default() || r.Table != kernel.MainTable || !r.Dst.Addr().Is4() {
			continue
		}
		l, ok := uplink(links, r.LinkIndex)
		if !ok {
			continue
		}
		if at == nil || r.Priority < best {
			best, at = r.Priority, nil
		}
		if r.Priority == best {
			at = appendLink(at, l)
		}
	}
	switch {
	case len(at) == 1:
		return at[0], "the IPv4 default route uses it" + noRouteFor(subnet), nil
	case len(at) > 1:
		return kernel.Link{}, "", config.Invalidf("parent=%s: this host has IPv4 default routes on several links (%s) with the same metric%s: pass the link with -o parent, or a list of candidates (-o parent=IFACE1,IFACE2)", asked, linkNames(at), noRouteFor(subnet))
	}
	return kernel.Link{}, "", config.Invalidf("parent=%s: no route of this host holds the subnet %s, and it has no IPv4 default route: pass the link with -o parent=IFACE, or a list of candidates (-o parent=IFACE1,IFACE2)", asked, subnetText(subnet))
}

func noRouteFor(subnet netip.Prefix) string {
	if !subnet.IsValid() {
		return " (the network has no IPv4 subnet)"
	}
	return fmt.Sprintf(" (no connected route holds the subnet %s)", subnet)
}

func subnetText(subnet netip.Prefix) string {
	if !subnet.IsValid() {
		return "(none: the network has no IPv4 subnet)"
	}
	return subnet.String()
}

// uplink is the link a route's interface stands for: a macvlan or ipvlan
// link (a user's shim to reach containers, underlay's host link) stands
// for its lower link. Loopback and unknown indexes stand for nothing.
func uplink(links []kernel.Link, index int) (kernel.Link, bool) {
	l, ok := LinkByIndex(links, index)
	if ok && kernel.IsEndpointKind(l.Kind) {
		l, ok = LinkByIndex(links, l.ParentIndex)
	}
	if !ok || l.Name == "lo" {
		return kernel.Link{}, false
	}
	return l, true
}

func appendLink(ls []kernel.Link, l kernel.Link) []kernel.Link {
	for _, x := range ls {
		if x.Index == l.Index {
			return ls
		}
	}
	return append(ls, l)
}

func linkNames(ls []kernel.Link) string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// hostLinkNames names the host's links a user could list as candidates
// (not loopback, not the links underlay or Docker make), at most
// maxNamedLinks of them.
func hostLinkNames(links []kernel.Link) string {
	var ls []kernel.Link
	for _, l := range links {
		if l.Name == "lo" || config.IsDummyName(l.Name) || config.IsShimName(l.Name) || config.IsEndpointLinkName(l.Name) || IsDockerLink(l) {
			continue
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return "none"
	}
	names := strings.Split(linkNames(ls), ", ")
	if len(names) > maxNamedLinks {
		return strings.Join(names[:maxNamedLinks], ", ") + fmt.Sprintf(" and %d more", len(names)-maxNamedLinks)
	}
	return strings.Join(names, ", ")
}

const maxNamedLinks = 20

// IsDockerLink reports links Docker makes: its bridges and the host ends
// of its containers' veths.
func IsDockerLink(l kernel.Link) bool {
	return (l.Kind == kernel.KindBridge && isDockerBridge(l.Name)) || (l.Kind == "veth" && strings.HasPrefix(l.Name, "veth"))
}

// FirstIPv4Subnet is the network's first IPv4 subnet, if it has one.
func FirstIPv4Subnet(n record.Network) netip.Prefix {
	for _, p := range n.IPv4 {
		if s, err := netip.ParsePrefix(p.Subnet); err == nil && s.Addr().Is4() {
			return s.Masked()
		}
	}
	return netip.Prefix{}
}
