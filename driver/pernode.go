package driver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Per-node parents. One network definition serves nodes whose NICs are
// named differently (a swarm network reaches every node with the same
// options), so the parent option may name more than one link:
//
//	parent=eth0             that link
//	parent=lan-a,lan-b      the first candidate that exists on this node
//	                        (IFACE.VID candidates count when IFACE exists)
//	parent=auto             the link whose connected route holds the
//	                        network's IPv4 subnet, else the default route's
//	parent=auto.VID         VLAN VID on the link auto picks
//
// pickParent turns the option into the one name this node resolves as if
// the user had given it (resolve.go); it is pure, over the node's links
// and routes. The record keeps the option as asked and the link it
// resolved to; reuse compares what was asked.

// autoParent is the parent option's keyword for "pick by routes".
const autoParent = "auto"

// maxCandidates bounds a candidate list (the manager parses it too).
const maxCandidates = 32

// parentSpec is a parsed parent option.
type parentSpec struct {
	// Candidates are the names to try in order: one for a plain name,
	// none for auto or an internal network.
	Candidates []string
	// Auto picks the link by the host's routes; VLAN (auto.VID) asks for
	// that VLAN on it.
	Auto bool
	VLAN int
}

// parseParent validates the parent option's syntax without looking at
// the host: the swarm manager (AllocateNetwork) can do no more.
func parseParent(v string) (parentSpec, error) {
	switch {
	case v == "":
		return parentSpec{}, nil
	case v == autoParent:
		return parentSpec{Auto: true}, nil
	case strings.HasPrefix(v, autoParent+".") && !strings.Contains(v, ","):
		id := strings.TrimPrefix(v, autoParent+".")
		vid, err := strconv.Atoi(id)
		if err != nil || strings.ContainsAny(id, "+-") || vid < 1 || vid > 4094 {
			return parentSpec{}, invalidf("parent %q: auto.VID needs a VLAN ID from 1 to 4094 (for example parent=auto.10)", v)
		}
		return parentSpec{Auto: true, VLAN: vid}, nil
	}
	names := strings.Split(v, ",")
	if len(names) > maxCandidates {
		return parentSpec{}, invalidf("parent lists %d candidates, more than %d: list the interface names your hosts really use, or use parent=auto", len(names), maxCandidates)
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		switch {
		case name == "":
			return parentSpec{}, invalidf("parent %q has an empty candidate: list interface names separated by commas, without spaces (parent=eth0,ens3)", v)
		case len(names) > 1 && (name == autoParent || strings.HasPrefix(name, autoParent+".")):
			return parentSpec{}, invalidf("parent %q: %s cannot be one of several candidates: use parent=%s alone, or list interface names", v, name, name)
		case seen[name]:
			return parentSpec{}, invalidf("parent %q lists %s twice: list each candidate once", v, name)
		}
		seen[name] = true
		if err := checkParentName(name); err != nil {
			return parentSpec{}, err
		}
	}
	return parentSpec{Candidates: names}, nil
}

// multiple reports whether the option can resolve differently per node.
func (s parentSpec) multiple() bool { return s.Auto || len(s.Candidates) > 1 }

// pickParent chooses the name this node resolves for the network, and
// says why. A plain name is itself.
func pickParent(n store.Network, spec parentSpec, links []netlinkutil.Link, routes []netlinkutil.Route) (name, why string, err error) {
	asked := requestedParent(n)
	switch {
	case spec.Auto:
		l, why, err := autoLink(n, asked, links, routes)
		if err != nil || spec.VLAN == 0 {
			return l.Name, why, err
		}
		if l.Kind == kindVLAN {
			if l.VLAN == spec.VLAN {
				return l.Name, why + ", which is VLAN " + strconv.Itoa(spec.VLAN), nil
			}
			// auto picked another VLAN: the VLAN asked for goes on the
			// link under it, not on top of it.
			if lower, ok := linkByIndex(links, l.ParentIndex); ok {
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
		return "", "", invalidf("none of the parent candidates %s exists on this host (its interfaces: %s): add this host's interface to the list (-o parent=%s,IFACE), or create one of them here", strings.Join(spec.Candidates, ", "), hostLinkNames(links), asked)
	}
	return "", "", nil
}

// candidateExists reports whether a candidate can be a parent here: the
// link exists, or it is IFACE.VID and IFACE exists (underlay creates the
// VLAN).
func candidateExists(name string, links []netlinkutil.Link) bool {
	if _, ok := findLink(links, name); ok {
		return true
	}
	base, _, ok := splitVLAN(name)
	if !ok {
		return false
	}
	_, ok = findLink(links, base)
	return ok
}

// autoLink is the link auto picks: the link of the most specific
// connected route holding the network's IPv4 subnet, else the link of the
// IPv4 default route with the lowest metric. A route on a macvlan or ipvlan
// link counts for its lower link (that is where the LAN is); two links
// tied is a refusal naming them.
func autoLink(n store.Network, asked string, links []netlinkutil.Link, routes []netlinkutil.Route) (netlinkutil.Link, string, error) {
	subnet := firstIPv4Subnet(n)
	if subnet.IsValid() {
		best, at := -1, []netlinkutil.Link(nil)
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
			return netlinkutil.Link{}, "", invalidf("parent=%s: the subnet %s is on several links of this host (%s): pass the link with -o parent, or a list of candidates (-o parent=IFACE1,IFACE2), one per node", asked, subnet, linkNames(at))
		}
	}
	best, at := 0, []netlinkutil.Link(nil)
	for _, r := range routes {
		if !r.Default() || r.Table != netlinkutil.MainTable || !r.Dst.Addr().Is4() {
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
		return netlinkutil.Link{}, "", invalidf("parent=%s: this host has IPv4 default routes on several links (%s) with the same metric%s: pass the link with -o parent, or a list of candidates (-o parent=IFACE1,IFACE2)", asked, linkNames(at), noRouteFor(subnet))
	}
	return netlinkutil.Link{}, "", invalidf("parent=%s: no route of this host holds the subnet %s, and it has no IPv4 default route: pass the link with -o parent=IFACE, or a list of candidates (-o parent=IFACE1,IFACE2)", asked, subnetText(subnet))
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
func uplink(links []netlinkutil.Link, index int) (netlinkutil.Link, bool) {
	l, ok := linkByIndex(links, index)
	if ok && netlinkutil.IsEndpointKind(l.Kind) {
		l, ok = linkByIndex(links, l.ParentIndex)
	}
	if !ok || l.Name == "lo" {
		return netlinkutil.Link{}, false
	}
	return l, true
}

func appendLink(ls []netlinkutil.Link, l netlinkutil.Link) []netlinkutil.Link {
	for _, x := range ls {
		if x.Index == l.Index {
			return ls
		}
	}
	return append(ls, l)
}

func linkNames(ls []netlinkutil.Link) string {
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
func hostLinkNames(links []netlinkutil.Link) string {
	var ls []netlinkutil.Link
	for _, l := range links {
		if l.Name == "lo" || isDummyName(l.Name) || isShimName(l.Name) || isEndpointLinkName(l.Name) || isDockerLink(l) {
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

// isDockerLink reports links Docker makes: its bridges and the host ends
// of its containers' veths.
func isDockerLink(l netlinkutil.Link) bool {
	return (l.Kind == netlinkutil.KindBridge && isDockerBridge(l.Name)) || (l.Kind == "veth" && strings.HasPrefix(l.Name, "veth"))
}

// firstIPv4Subnet is the network's first IPv4 subnet, if it has one.
func firstIPv4Subnet(n store.Network) netip.Prefix {
	for _, p := range n.IPv4 {
		if s, err := netip.ParsePrefix(p.Subnet); err == nil && s.Addr().Is4() {
			return s.Masked()
		}
	}
	return netip.Prefix{}
}

// resolve resolves the network's parent on this host. A plain name that
// exists as an ordinary parent needs one lookup (the kernel resolves
// altnames); anything else (a VLAN to find or create, a link to refuse
// naming its lower link, candidates, auto) lists every link once, and
// auto the routes too.
func (d *Driver) resolve(ctx context.Context, n store.Network) (resolution, error) {
	spec, err := parseParent(requestedParent(n))
	if err != nil {
		return resolution{}, err
	}
	if !spec.multiple() {
		name := dummyName(n.ID)
		if len(spec.Candidates) == 1 {
			name = spec.Candidates[0]
		}
		l, err := d.links.Get(ctx, name)
		switch {
		case err == nil && !netlinkutil.IsEndpointKind(l.Kind):
			return resolveParent(n, []netlinkutil.Link{l}, nil)
		case err != nil && !errors.Is(err, netlinkutil.ErrNotFound):
			return resolution{}, err
		}
	}
	links, err := d.links.List(ctx)
	if err != nil {
		return resolution{}, err
	}
	var routes []netlinkutil.Route
	if spec.Auto {
		if d.routes == nil {
			return resolution{}, fmt.Errorf("parent=%s needs the host's routes, and this daemon was built without access to them: pass -o parent=IFACE", requestedParent(n))
		}
		if routes, err = d.routes.Routes(ctx); err != nil {
			return resolution{}, err
		}
	}
	return resolveParent(n, links, routes)
}
