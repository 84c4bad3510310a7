package ipam

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// Pure rules over the host's state and the pools asked for: which routes
// block automatic pools, which kernel link a parent is, which prefixes can
// never be a pool.

// blockingRoutes are the destinations of the routes an automatic pool must
// not overlap: every route of every table except default routes, and
// except routes that together are a default route. A table whose widest
// routes (those inside no other route of the table) cover the whole
// address space of their family routes everything through them: OpenVPN's
// def1 (0.0.0.0/1 and 128.0.0.0/1 instead of 0.0.0.0/0) and its IPv6 twin
// (::/1 and 8000::/1). Those widest routes block nothing, as a default
// route; the routes inside them still do.
func blockingRoutes(routes []kernel.Route) []netip.Prefix {
	type group struct {
		table int
		v6    bool
	}
	dsts := map[group][]netip.Prefix{}
	var order []group
	for _, r := range routes {
		if !r.Dst.IsValid() || r.Default() {
			continue
		}
		g := group{r.Table, r.Dst.Addr().Is6()}
		if _, ok := dsts[g]; !ok {
			order = append(order, g)
		}
		dsts[g] = append(dsts[g], r.Dst.Masked())
	}
	var out []netip.Prefix
	for _, g := range order {
		ps := dsts[g]
		widest := widestOf(ps)
		if !coversAll(widest, g.v6) {
			out = append(out, ps...)
			continue
		}
		wide := map[netip.Prefix]bool{}
		for _, w := range widest {
			wide[w] = true
		}
		for _, p := range ps {
			if !wide[p] {
				out = append(out, p)
			}
		}
	}
	return out
}

// widestOf returns the distinct prefixes of ps inside no other prefix of
// ps, in address order. Two prefixes either nest or are disjoint, so these
// are pairwise disjoint.
func widestOf(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		inside := false
		for j, q := range ps {
			if q.Bits() < p.Bits() && q.Contains(p.Addr()) || q == p && j < i {
				inside = true // inside a wider one, or a duplicate
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	return out
}

// coversAll reports whether disjoint prefixes, in address order, cover
// every address of the family.
func coversAll(sorted []netip.Prefix, v6 bool) bool {
	next := netip.IPv4Unspecified()
	if v6 {
		next = netip.IPv6Unspecified()
	}
	for _, p := range sorted {
		if p.Addr() != next {
			return false
		}
		next = lastAddr(p).Next()
		if !next.IsValid() {
			return true // past the last address of the family
		}
	}
	return false
}

// parentRef is the --ipam-opt parent of a request, resolved over one list
// of the host's links.
type parentRef struct {
	// Asked is the option as given; "" for no parent.
	Asked string
	// Link is the kernel link it names, when Found.
	Link  kernel.Link
	Found bool
	links []kernel.Link
}

// Name is what a pool records as its parent: the link's kernel name, or
// the option as given when no link has it.
func (p parentRef) Name() string {
	if p.Found {
		return p.Link.Name
	}
	return p.Asked
}

// Same reports whether a held pool's recorded parent is this parent: the
// same kernel link (by index: one link under its name and its altnames is
// one parent), or, for a recorded name no link has any more, one of this
// link's names. No parent is only the same as no parent.
func (p parentRef) Same(held string) bool {
	switch {
	case p.Asked == "" || held == "":
		return p.Asked == "" && held == ""
	case !p.Found:
		return held == p.Asked
	}
	if l, ok := kernel.FindLink(p.links, held); ok {
		return l.Index == p.Link.Index
	}
	return p.Link.HasName(held)
}

// loopback reports whether a link is a loopback interface.
func loopback(l kernel.Link) bool { return l.Name == "lo" || l.Encap == "loopback" }

// special is an address range no pool may overlap.
type special struct {
	prefix netip.Prefix
	what   string
}

var specialRanges = []special{
	{netip.MustParsePrefix("127.0.0.0/8"), "the IPv4 loopback range (it never leaves the host)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "the IPv4 multicast range (no host address or gateway can be in it)"},
	{netip.MustParsePrefix("::1/128"), "the IPv6 loopback address (it never leaves the host)"},
	{netip.MustParsePrefix("fe80::/10"), "the IPv6 link-local range (every interface has its own fe80::/64, which the kernel configures)"},
	{netip.MustParsePrefix("ff00::/8"), "the IPv6 multicast range (no host address or gateway can be in it)"},
}

// poolRule says why a prefix can never be a pool of a network, or "" when
// it can: every address of the family (it would overlap every other
// subnet, and as a held pool block every automatic one), too small for a
// gateway and a container (IPv4 /31 and /32, IPv6 /127 and /128), or
// overlapping loopback, multicast or IPv6 link-local addresses. The
// answer names the rule and ends with the fix.
func poolRule(p netip.Prefix) string {
	v6 := p.Addr().Is6()
	example := map[bool]string{false: "198.18.1.0/24", true: "2001:db8:1::/64"}[v6]
	if p.Bits() == 0 {
		return fmt.Sprintf("is every IPv%s address (a default route's destination): as a pool it would overlap every other subnet; give the network a subnet of its own, such as %s", map[bool]string{false: "4", true: "6"}[v6], example)
	}
	if max := p.Addr().BitLen() - 2; p.Bits() > max {
		return fmt.Sprintf("is a /%d, which leaves no room for a gateway and a container (a network and broadcast address too, in IPv4): use a /%d or shorter, such as %s", p.Bits(), max, example)
	}
	for _, s := range specialRanges {
		if s.prefix.Addr().Is6() == v6 && s.prefix.Overlaps(p) {
			return fmt.Sprintf("overlaps %s, %s: use a unicast subnet outside it, such as %s", s.prefix, s.what, example)
		}
	}
	return ""
}
