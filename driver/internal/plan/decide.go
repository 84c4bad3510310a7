package plan

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// The CreateNetwork decisions, as pure functions over a snapshot of the
// state: no kernel, no store, no Docker. network.go acts on what they say.

type verdict int

const (
	// create: nothing stands in the way.
	VerdictCreate verdict = iota
	// reuse: the same ID with the same configuration is already there.
	VerdictReuse
	// replace: the same ID with another configuration is a stale duplicate
	// from an older incarnation; remove it, then create.
	VerdictReplace
	// move: the same ID and configuration, but its parent option resolves
	// to another link on this host now (parentMoved): remove the old copy,
	// then create it on the new link.
	VerdictMove
)

func (v verdict) String() string { return [...]string{"create", "reuse", "replace", "move"}[v] }

// Conflict is a network on the same parent that the new one cannot share
// the parent with.
type Conflict struct {
	Holder record.Network
	Reason string
}

// Decision is what CreateNetwork must do.
type Decision struct {
	Verdict verdict
	// Conflicts are the holders that block the create; each may still turn
	// out to be a stale record (Docker no longer knows it).
	Conflicts []Conflict
}

// Decide applies the parent rules. same is the stored network with the
// requested ID, if any; onParent are the stored networks on the requested
// parent (same excluded or not, it is skipped).
func Decide(want record.Network, same *record.Network, onParent []record.Network) Decision {
	var d Decision
	if same != nil {
		switch {
		case same.Pending == nil && SameConfig(want, *same) && (want.Parent == "" || want.Parent == same.Parent):
			return Decision{Verdict: VerdictReuse}
		case same.Pending == nil && SameConfig(want, *same):
			d.Verdict = VerdictMove
		default:
			d.Verdict = VerdictReplace
		}
	}
	for _, h := range onParent {
		if h.ID == want.ID {
			continue
		}
		if reason := incompatible(want, h); reason != "" {
			d.Conflicts = append(d.Conflicts, Conflict{Holder: h, Reason: reason})
		}
	}
	return d
}

// KeepParent reports whether a network must stay on its link although
// its parent option now resolves to another one: the link still exists
// and an endpoint of the network lives on it: joined in this boot (a
// container runs) or not joined yet (a container is starting). Endpoints
// joined in an earlier boot are over.
func KeepParent(linkExists bool, eps []record.Endpoint, boot string) bool {
	if !linkExists {
		return false
	}
	for _, ep := range eps {
		if ep.Sandbox == "" || ep.Boot == boot {
			return true
		}
	}
	return false
}

// SameConfig reports whether two records describe the same network, as
// the user asked for it: the requested parent, not what it resolved to on
// this host (that may differ after a reboot, and the network is the same).
func SameConfig(a, b record.Network) bool {
	return a.ID == b.ID && a.Type == b.Type && RequestedParent(a) == RequestedParent(b) && a.Mode == b.Mode &&
		a.Flag == b.Flag && a.MTU == b.MTU && a.Internal == b.Internal && a.HostAddress == b.HostAddress &&
		samePools(a.IPv4, b.IPv4) && samePools(a.IPv6, b.IPv6) && sameDHCP(a.Config.DHCP, b.Config.DHCP)
}

// sameDHCP compares the DHCP options; whether the pools are the IPAM's
// DHCP pools follows from the pools, and a request's is known only once
// its parent is resolved (after the reuse is decided).
func sameDHCP(a, b record.DHCPConfig) bool {
	a.FromIPAM, a.FromIPAM6, b.FromIPAM, b.FromIPAM6 = false, false, false, false
	return a == b
}

func samePools(a, b []record.Pool) bool {
	key := func(p []record.Pool) []record.Pool {
		c := append([]record.Pool(nil), p...)
		sort.Slice(c, func(i, j int) bool { return c[i].Subnet < c[j].Subnet })
		return c
	}
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(key(a), key(b))
}

// incompatible says why two networks cannot share one parent link, or ""
// if they can: the kernel's rules first (decided here so the kernel is never
// asked to do what it refuses or, worse, silently changes), then addressing.
func incompatible(want, holder record.Network) string {
	switch {
	case want.Type != holder.Type:
		return fmt.Sprintf("a parent link carries either macvlan or ipvlan links, never both (the kernel answers EBUSY), and it holds %s", holder.Type)
	case want.Type == kernel.KindMacvlan && holder.Mode == kernel.MacvlanPassthru:
		return "it holds a macvlan passthru network, which takes the parent link exclusively"
	case want.Type == kernel.KindMacvlan && want.Mode == kernel.MacvlanPassthru:
		return "macvlan passthru takes the parent link exclusively, and the parent already carries a network"
	case want.Type == kernel.KindIpvlan && want.Mode != holder.Mode:
		return fmt.Sprintf("all ipvlan links on one parent share one mode (the kernel applies the newest link's mode to all of them), and it uses ipvlan_mode=%s, not %s", holder.Mode, want.Mode)
	case want.Type == kernel.KindIpvlan && want.Flag != holder.Flag:
		return fmt.Sprintf("all ipvlan links on one parent share one flag (the kernel applies the newest link's flag to all of them), and it uses ipvlan_flag=%s, not %s", holder.Flag, want.Flag)
	}
	held := config.AllPools(holder)
	for _, a := range config.AllPools(want) {
		for _, b := range held {
			if config.PoolsOverlap(a, b) {
				return fmt.Sprintf("its subnet %s overlaps the subnet %s, so both would hand out the same addresses on one wire", b.Subnet, a.Subnet)
			}
		}
	}
	return ""
}

// maxNamed is how many conflicting holders a refusal names.
const maxNamed = 5

// ConflictError is the refusal for the conflicts that remain after stale
// holders were ruled out: it names every holder (up to maxNamed, then how
// many more), each with its reason and its fix. asked is the parent as the
// user gave it, want.Parent the link it resolved to.
func ConflictError(want record.Network, asked string, cs []Conflict) error {
	parent := want.Parent
	if asked != "" && asked != want.Parent {
		parent = fmt.Sprintf("%s (kernel link %s)", asked, want.Parent)
	}
	if len(cs) == 1 {
		c := cs[0]
		return fmt.Errorf("%w: parent %s is already used by network %s (%s): %s. Use another parent or subnet, or remove the holder with \"docker network rm %s\"",
			pluginapi.ErrConflict, parent, dockerid.Short(c.Holder.ID), Describe(c.Holder), c.Reason, dockerid.Short(c.Holder.ID))
	}
	msg := fmt.Sprintf("parent %s is already used by %d networks this one cannot share it with:", parent, len(cs))
	for i, c := range cs {
		if i == maxNamed {
			msg += fmt.Sprintf(" and %d more on this parent;", len(cs)-maxNamed)
			break
		}
		msg += fmt.Sprintf(" network %s (%s): %s, remove it with \"docker network rm %s\";", dockerid.Short(c.Holder.ID), Describe(c.Holder), c.Reason, dockerid.Short(c.Holder.ID))
	}
	return fmt.Errorf("%w: %s use another parent or subnet, or remove the holders", pluginapi.ErrConflict, msg)
}

// Describe summarises a network for messages.
func Describe(n record.Network) string {
	s := n.Type + " " + n.Mode
	if n.Type == kernel.KindIpvlan {
		s += "/" + n.Flag
	}
	for _, p := range config.AllPools(n) {
		s += " " + p.Subnet
	}
	if n.Pending != nil {
		s += ", still being created"
	}
	return s
}
