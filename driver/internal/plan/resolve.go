package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// IsPlanned reports whether an existing link is exactly the parent link
// planned, made by this instance (a previous attempt): same kind, its mark,
// and for a VLAN the same ID on the same base. A user's link that merely
// looks alike is not adopted.
func IsPlanned(l kernel.Link, p record.ParentLink, links []kernel.Link, mark string) bool {
	if l.Name != p.Name || l.Kind != p.Kind || l.Alias != mark {
		return false
	}
	if p.Kind != kernel.KindVLAN {
		return true
	}
	b, ok := FindLink(links, p.Base)
	return ok && l.ParentIndex == b.Index && l.VLAN == p.VLAN
}

// Parent resolution: which kernel link a requested parent really is. Every
// parent rule (locks, conflicts, ownership) is decided on that link, so one
// link under two names is one parent: an altname resolves to the link's
// name, a VLAN asked as IFACE.VID resolves to the VLAN with that ID on IFACE
// whatever its name, and a VLAN underlay creates is named by the base's
// kernel name and the ID in decimal (eth0.010 and lan0.10, with lan0 an
// altname of eth0, both become eth0.10). A macvlan or ipvlan link is refused
// as parent: the kernel would put the new links on its lower link, beside
// other networks there, unchecked.

// Resolution is where a network's parent lands on this host.
type Resolution struct {
	// Name is the kernel name of the parent link.
	Name string
	// Why says how a per-node parent option (candidates, auto) chose the
	// link; empty for a plain name.
	Why string
	// Create is the parent link underlay must create, or nil when Name
	// exists.
	Create *record.ParentLink
	// Link is the parent link Name as the kernel's Get returned it (with
	// Wireless, which only Get fills), when the resolution looked it up
	// by name; nil when it listed the links (or Create is set).
	Link *kernel.Link
}

// ResolveParent is pure: it decides over one list of the host's links
// (and its routes, which only parent=auto reads). n carries the requested
// parent (empty for an internal network), the ID, the MTU and the subnets.
func ResolveParent(n record.Network, links []kernel.Link, routes []kernel.Route) (Resolution, error) {
	spec, err := config.ParseParent(RequestedParent(n))
	if err != nil {
		return Resolution{}, err
	}
	asked, why, err := pickParent(n, spec, links, routes)
	if err != nil {
		return Resolution{}, err
	}
	res, err := resolveName(n, asked, links)
	if err != nil && why != "" {
		return Resolution{}, fmt.Errorf("parent=%s chose %s on this host (%s), but: %w", RequestedParent(n), asked, why, err)
	}
	res.Why = why
	return res, err
}

// resolveName resolves one parent name, as the user gave it or as
// pickParent chose it; "" is an internal network's dummy.
func resolveName(n record.Network, asked string, links []kernel.Link) (Resolution, error) {
	if asked == "" {
		name := config.DummyName(n.ID)
		if l, ok := FindLink(links, name); ok {
			return Resolution{Name: l.Name}, checkParentLink(l, n, links)
		}
		return Resolution{Name: name, Create: &record.ParentLink{Name: name, Kind: kernel.KindDummy, MTU: n.MTU}}, nil
	}
	if l, ok := FindLink(links, asked); ok {
		if err := checkParentLink(l, n, links); err != nil {
			return Resolution{}, err
		}
		return Resolution{Name: l.Name}, checkMTU(n, l.Name, l.MTU)
	}
	base, vid, ok := kernel.SplitVLAN(asked)
	if !ok {
		return Resolution{}, config.Invalidf("parent interface %s does not exist on this host: pass an existing interface with -o parent=IFACE, or IFACE.VLAN (for example eth0.10) to have underlay create a VLAN sub-interface", asked)
	}
	if vid < 1 || vid > 4094 {
		return Resolution{}, config.Invalidf("parent %s asks for VLAN %d, outside 1-4094: use a VLAN ID from 1 to 4094", asked, vid)
	}
	b, ok := FindLink(links, base)
	if !ok {
		return Resolution{}, config.Invalidf("parent %s would be VLAN %d on %s, but %s does not exist on this host: use an existing interface as the base", asked, vid, base, base)
	}
	if b.Name == "lo" {
		return Resolution{}, config.Invalidf("parent %s would be a VLAN on the loopback interface: use a physical interface as the base", asked)
	}
	if err := checkParentLink(b, n, links); err != nil {
		return Resolution{}, err
	}
	if err := checkMTU(n, b.Name, b.MTU); err != nil {
		return Resolution{}, err
	}
	for _, l := range links {
		if l.Kind == kernel.KindVLAN && l.ParentIndex == b.Index && l.VLAN == vid {
			// VLAN vid on the base exists under another name (a user's
			// uv20, or eth0.10 asked as eth0.010): that is the link the
			// network would use, so use it.
			if err := checkParentLink(l, n, links); err != nil {
				return Resolution{}, err
			}
			return Resolution{Name: l.Name}, checkMTU(n, l.Name, l.MTU)
		}
	}
	name := b.Name + "." + strconv.Itoa(vid)
	if l, ok := FindLink(links, name); ok {
		return Resolution{}, config.Invalidf("parent %s would be VLAN %d on %s named %s, but a %s link named %s exists and is not that VLAN: remove or rename it, or create VLAN %d on %s under another name and pass that name", asked, vid, b.Name, name, l.Kind, l.Name, vid, b.Name)
	}
	if len(name) > kernel.MaxNameLen {
		return Resolution{}, config.Invalidf("parent %s would be a VLAN link named %s, longer than the kernel's %d bytes: create VLAN %d on %s yourself under a shorter name and pass that name as -o parent", asked, name, kernel.MaxNameLen, vid, b.Name)
	}
	return Resolution{Name: name, Create: &record.ParentLink{Name: name, Kind: kernel.KindVLAN, Base: b.Name, VLAN: vid}}, nil
}

// RequestedParent is the parent as the user asked for it: the parent
// option, empty for an internal network without one. Records of versions
// that did not keep the option fall back to the stored link name.
func RequestedParent(n record.Network) string {
	if v, ok := n.Options[config.OptParent]; ok {
		return v
	}
	if config.IsDummyName(n.Parent) {
		return ""
	}
	return n.Parent
}

// FindLink finds a link by name or altname.
func FindLink(links []kernel.Link, name string) (kernel.Link, bool) {
	return kernel.FindLink(links, name)
}

// LinkByIndex finds a link by index.
func LinkByIndex(links []kernel.Link, index int) (kernel.Link, bool) {
	for _, l := range links {
		if l.Index == index {
			return l, true
		}
	}
	return kernel.Link{}, false
}

// checkParentLink refuses links that must never be a parent.
func checkParentLink(l kernel.Link, n record.Network, links []kernel.Link) error {
	switch {
	case l.Name == "lo":
		return config.Invalidf("parent lo is the loopback interface, which cannot carry macvlan or ipvlan links: use a physical or VLAN interface")
	case config.IsEndpointLinkName(l.Name) && kernel.IsEndpointKind(l.Kind):
		return config.Invalidf("parent %s is an endpoint link underlay created for a container: use the host interface it hangs off", l.Name)
	case kernel.IsEndpointKind(l.Kind):
		lower := "its lower link"
		if p, ok := LinkByIndex(links, l.ParentIndex); ok {
			lower = p.Name
		}
		return config.Invalidf("parent %s is a %s link on %s: the kernel puts links made on it onto %s, beside the networks there: use -o parent=%s", l.Name, l.Kind, lower, lower, lower)
	case config.IsDummyName(l.Name) && l.Name != config.DummyName(n.ID):
		return config.Invalidf("parent %s is the dummy link of another internal network: omit -o parent to get an internal network of its own", l.Name)
	case !l.Ethernet():
		return config.Invalidf("parent %s is not an Ethernet link (the kernel calls its type %s, a %s link): macvlan and ipvlan links need an Ethernet parent, such as a NIC, a VLAN of one or a bridge", l.Name, l.Encap, l.Kind)
	case l.Kind == kernel.KindBridge && isDockerBridge(l.Name):
		return config.Invalidf("parent %s is a bridge Docker manages: macvlan and ipvlan networks need a host uplink interface (for example eth0) as parent", l.Name)
	}
	return nil
}

func isDockerBridge(name string) bool {
	if name == "docker0" || name == "docker_gwbridge" {
		return true
	}
	rest, ok := strings.CutPrefix(name, "br-")
	return ok && len(rest) == config.IDChars && strings.Trim(rest, "0123456789abcdef") == ""
}

func checkMTU(n record.Network, parent string, parentMTU int) error {
	if n.MTU > parentMTU && parentMTU > 0 {
		return config.Invalidf("mtu %d is larger than the MTU %d of parent %s: use -o mtu=%d or less, or raise the parent's MTU", n.MTU, parentMTU, parent, parentMTU)
	}
	return nil
}
