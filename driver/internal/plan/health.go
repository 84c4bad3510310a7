package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Health of the links underlay owns: a link is healthy when it exists,
// carries this instance's mark, is up and has what underlay gave it (a
// parent's recorded MTU; a host link's address and MTU). These planners
// say what to do with the owned links that exist but are not healthy, and
// with an owned VLAN an operator renamed (the record follows the link: it
// is the same VLAN, and endpoint links may stand on it).

// BrokenBy says what is wrong with an existing link of this instance: ""
// when nothing is. mtu is the MTU underlay gave it (0: the kernel's), addr
// the host address it must carry (invalid: none), have its addresses.
func BrokenBy(l kernel.Link, mtu int, addr netip.Addr, have []netip.Addr) string {
	var why []string
	if l.Down {
		why = append(why, "it is down")
	}
	if addr.IsValid() && !slices.Contains(have, addr) {
		why = append(why, fmt.Sprintf("it lost its address %s", addr))
	}
	if mtu > 0 && l.MTU != mtu {
		why = append(why, fmt.Sprintf("its MTU is %d, not %d", l.MTU, mtu))
	}
	return strings.Join(why, ", ")
}

// planHealParents heals the needed owned parent links that exist with
// this instance's mark but are down or lost their recorded MTU.
func planHealParents(s Snapshot, links []kernel.Link, mark string) []Step {
	var plan []Step
	for _, name := range slices.Sorted(maps.Keys(s.Owned)) {
		p := s.Owned[name]
		l, ok := FindLink(links, name)
		if !ok || l.Name != name || l.Alias != mark || !s.needed(name) {
			continue
		}
		if why := BrokenBy(l, p.MTU, netip.Addr{}, nil); why != "" {
			plan = append(plan, Step{Op: OpHeal, Name: name, Parent: p, Why: why})
		}
	}
	return plan
}

// PlanFollow finds the owned VLANs an operator renamed: a record whose
// name no link has, and a link carrying this instance's mark that no
// record names, with the record's VLAN ID on the record's base. The record
// moves to the link's name (opFollow), with the networks on it.
func PlanFollow(s Snapshot, links []kernel.Link, mark string) []Step {
	var plan []Step
	taken := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(s.Owned)) {
		p := s.Owned[name]
		if p.Kind != kernel.KindVLAN {
			continue
		}
		if _, ok := FindLink(links, name); ok {
			continue
		}
		base, ok := FindLink(links, p.Base)
		if !ok {
			continue
		}
		for _, l := range links {
			if l.Kind == kernel.KindVLAN && l.Alias == mark && l.ParentIndex == base.Index && l.VLAN == p.VLAN &&
				!s.Recorded(l.Name) && !taken[l.Name] {
				taken[l.Name] = true
				plan = append(plan, Step{Op: OpFollow, Name: name, To: l.Name, Parent: p,
					Why: fmt.Sprintf("VLAN %d on %s was renamed from %s to %s: the record follows the link", p.VLAN, p.Base, name, l.Name)})
				break
			}
		}
	}
	return plan
}

// followed is the snapshot as it is once the follow steps are carried out.
func (s Snapshot) followed(plan []Step) Snapshot {
	if len(plan) == 0 {
		return s
	}
	out := s
	out.Owned = make(map[string]record.ParentLink, len(s.Owned))
	for k, v := range s.Owned {
		out.Owned[k] = v
	}
	out.Use = make(map[string]int, len(s.Use))
	for k, v := range s.Use {
		out.Use[k] = v
	}
	out.Shims = make(map[string]ShimState, len(s.Shims))
	for k, v := range s.Shims {
		out.Shims[k] = v
	}
	for _, st := range plan {
		if st.Op != OpFollow {
			continue
		}
		p := out.Owned[st.Name]
		delete(out.Owned, st.Name)
		p.Name = st.To
		out.Owned[st.To] = p
		for k, v := range out.Owned {
			if v.Base == st.Name {
				v.Base = st.To
				out.Owned[k] = v
			}
		}
		out.Use[st.To] += out.Use[st.Name]
		delete(out.Use, st.Name)
		for k, v := range out.Shims {
			if v.Network.Parent == st.Name {
				v.Network.Parent = st.To
				out.Shims[k] = v
			}
		}
	}
	return out
}

// StandsOn reports whether another link of the namespace has l as its
// lower link.
func StandsOn(links []kernel.Link, l kernel.Link) []string {
	var out []string
	for _, o := range links {
		if o.ParentIndex == l.Index && o.Index != l.Index {
			out = append(out, o.Name)
		}
	}
	return out
}
