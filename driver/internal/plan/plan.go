package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Reconcile and parent release are planned, then acted on: one snapshot of
// the store and one list of the kernel's links go in, a pure planner says
// which steps to take in which order, and driver/internal/reconcile
// carries them out.

// Snapshot is what the planners know of the state file.
type Snapshot struct {
	// Pending are the networks whose creation has not finished.
	Pending []record.Network
	// Use counts, for every link networks name as parent, how many do.
	Use map[string]int
	// Owned are the parent links underlay created, by name.
	Owned map[string]record.ParentLink
	// EndpointLinks are the host link names of recorded endpoints (only
	// read for reconcile).
	EndpointLinks map[string]bool
	// Shims are the networks with a host address and the routes their
	// host link carries (read for reconcile and repair), by link name.
	Shims map[string]ShimState
	// ShimAddrs are the addresses the kernel shows on the host links that
	// exist, by link name (read with Shims).
	ShimAddrs map[string][]netip.Addr
}

// Recorded reports whether a record owns the link: an owned parent, a
// network's host link, or (when the snapshot read them) an endpoint's.
func (s Snapshot) Recorded(name string) bool {
	_, owned := s.Owned[name]
	_, shim := s.Shims[name]
	return owned || shim || s.EndpointLinks[name]
}

// op is what one step does.
type op int

const (
	// opRollback deletes the record of a network whose creation never
	// finished (its parent is then released like any other).
	OpRollback op = iota
	// opRecreate creates an owned parent link that is needed and missing.
	OpRecreate
	// opRelease deletes an owned parent link nothing needs, then forgets it.
	OpRelease
	// opForget forgets an owned parent link that is gone, or that now
	// carries another instance's mark (never deleted).
	OpForget
	// opKeep keeps an unneeded owned parent link that links underlay did
	// not make stand on; it is reconsidered later.
	OpKeep
	// opDeleteStray deletes a link carrying this instance's mark that no
	// record owns (left by a crash).
	OpDeleteStray
	// opRepoint moves the networks recorded on an altname of a link (by a
	// version that kept the parent as asked) to the link's kernel name,
	// so conflicts and locks see one parent.
	OpRepoint
	// opShim makes a network's missing host link with its routes.
	OpShim
	// opRoutes puts back the routes of an existing host link.
	OpRoutes
	// opHeal puts back what an existing owned link lost: up, its MTU, a
	// host link's address (health.go).
	OpHeal
	// opFollow moves the record of an owned VLAN an operator renamed to
	// the link's new name, with the networks on it (health.go).
	OpFollow
	// OpContainer makes a joined endpoint's interface again in its
	// container after its parent link was made again (containers.go).
	OpContainer
	// OpAbandon gives up on a container's interface whose parent link
	// did not come back in time (containers.go).
	OpAbandon
)

func (o op) String() string {
	if names := opNames(); int(o) < len(names) {
		return names[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// opNames are the ops' names, by op: every op has one (TestOpsAreClassified
// holds RestoreOps and ContainerOps to them).
func opNames() []string {
	return []string{"rollback", "recreate", "release", "forget", "keep", "delete-stray", "repoint", "shim", "routes", "heal", "follow", "container", "abandon"}
}

// Step is one action of a plan.
type Step struct {
	Op op
	// Name is the network ID (opRollback) or the link name.
	Name string
	// Parent is the owned parent link's record (opRecreate, opRelease).
	Parent record.ParentLink
	// To is the kernel name the networks on Name move to (opRepoint).
	To string
	// Shim is the network whose host link the step makes (opShim,
	// opRoutes, and opHeal of a host link).
	Shim ShimState
	// Container is the joined endpoint whose interface the step makes
	// again or gives up (OpContainer, OpAbandon), Link its parent link
	// now (OpContainer), Problem why it cannot be made there ("": none).
	Container *Plumbed
	Link      kernel.Link
	Problem   string
	// Why explains the step in the log.
	Why string
}

func (s Step) String() string {
	if s.To != "" {
		return s.Op.String() + " " + s.Name + "->" + s.To
	}
	return s.Op.String() + " " + s.Name
}

// OwnsLink reports whether underlay, as the instance with this mark, may
// delete a link: it carries the mark, or it carries no mark at all and a
// record of this state file names it (made by a version before marks, or
// between creation and marking). A link with another mark is never ours.
func OwnsLink(l kernel.Link, mark string, recorded bool) bool {
	return l.Alias == mark || (l.Alias == "" && recorded)
}

// needed reports whether an owned parent link must stay: a network names
// it, or an owned link on it must stay (a VLAN on a VLAN).
func (s Snapshot) needed(name string) bool {
	if s.Use[name] > 0 {
		return true
	}
	for _, up := range s.uppers(name) {
		if s.needed(up) {
			return true
		}
	}
	return false
}

// uppers are the owned links whose base is name, in name order.
func (s Snapshot) uppers(name string) []string {
	var out []string
	for n, p := range s.Owned {
		if p.Base == name && n != name {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// PlanRelease plans the release of the owned parent links among
// candidates that nothing needs: the links underlay made on one go first,
// then the link, then its base if underlay owns that and nothing else needs
// it. A link with links underlay did not make on it is kept; one carrying
// another instance's mark, or already gone, is only forgotten.
func PlanRelease(s Snapshot, links []kernel.Link, mark string, candidates []string) []Step {
	var plan []Step
	visited := map[string]bool{}
	released := map[int]bool{} // indexes of links this plan deletes
	var visit func(name string)
	visit = func(name string) {
		p, owned := s.Owned[name]
		if visited[name] || !owned || s.needed(name) {
			return
		}
		visited[name] = true
		for _, up := range s.uppers(name) {
			visit(up)
		}
		l, ok := FindLink(links, name)
		switch {
		case !ok || l.Name != name:
			plan = append(plan, Step{Op: OpForget, Name: name, Parent: p, Why: "the link is gone"})
		case !OwnsLink(l, mark, true):
			plan = append(plan, Step{Op: OpForget, Name: name, Parent: p, Why: fmt.Sprintf("the link now carries the mark %q of another owner", l.Alias)})
		default:
			var others []string
			for _, o := range links {
				if o.ParentIndex == l.Index && o.Index != l.Index && !released[o.Index] {
					others = append(others, o.Name)
				}
			}
			if len(others) > 0 {
				plan = append(plan, Step{Op: OpKeep, Name: name, Parent: p, Why: fmt.Sprintf("links underlay did not make stand on it: %v", others)})
				return
			}
			released[l.Index] = true
			plan = append(plan, Step{Op: OpRelease, Name: name, Parent: p, Why: "no network needs it"})
		}
		if p.Kind == kernel.KindVLAN {
			visit(p.Base)
		}
	}
	for _, c := range candidates {
		visit(c)
	}
	return plan
}

// PlanRestore plans reconcile at start: delete the links carrying this
// instance's mark that no record owns, roll back every pending network (its
// process died), re-create the needed owned parent links that are missing
// (bases first), and release the ones nothing needs. Networks recorded on
// an altname move to the link's kernel name. Links without this instance's
// mark are never deleted as strays.
func PlanRestore(s Snapshot, links []kernel.Link, mark string) []Step {
	plan := PlanFollow(s, links, mark)
	s = s.followed(plan)
	var kept []kernel.Link // the links that stay after the strays go
	for _, l := range links {
		if l.Alias != mark || s.Recorded(l.Name) {
			kept = append(kept, l)
			continue
		}
		if on := StandsOn(links, l); len(on) > 0 {
			kept = append(kept, l)
			plan = append(plan, Step{Op: OpKeep, Name: l.Name, Why: fmt.Sprintf("it carries underlay's mark and no record owns it, but links stand on it: %v", on)})
			continue
		}
		plan = append(plan, Step{Op: OpDeleteStray, Name: l.Name, Why: "it carries underlay's mark and no record owns it (left by a crash or a deleted network)"})
	}
	links = kept
	var used []string
	for name, n := range s.Use {
		if _, owned := s.Owned[name]; n > 0 && !owned {
			used = append(used, name)
		}
	}
	sort.Strings(used)
	for _, name := range used {
		if l, ok := FindLink(links, name); ok && l.Name != name {
			plan = append(plan, Step{Op: OpRepoint, Name: name, To: l.Name, Why: "the parent was recorded by an altname of the link"})
		}
	}
	after := Snapshot{Use: map[string]int{}, Owned: s.Owned, EndpointLinks: s.EndpointLinks}
	for k, v := range s.Use {
		after.Use[k] = v
	}
	pending := append([]record.Network(nil), s.Pending...)
	sort.Slice(pending, func(i, j int) bool { return pending[i].ID < pending[j].ID })
	for _, n := range pending {
		plan = append(plan, Step{Op: OpRollback, Name: n.ID, Why: "left half-created by a previous run"})
		after.Use[n.Parent]--
	}
	owned := make([]string, 0, len(s.Owned))
	for name := range s.Owned {
		owned = append(owned, name)
	}
	depth := func(name string) int {
		d := 0
		for p, ok := s.Owned[name]; ok && d < len(s.Owned); p, ok = s.Owned[p.Base] {
			d++
		}
		return d
	}
	sort.Slice(owned, func(i, j int) bool {
		if di, dj := depth(owned[i]), depth(owned[j]); di != dj {
			return di < dj
		}
		return owned[i] < owned[j]
	})
	for _, name := range owned {
		if !after.needed(name) {
			continue
		}
		if l, ok := FindLink(links, name); !ok || l.Name != name {
			plan = append(plan, Step{Op: OpRecreate, Name: name, Parent: s.Owned[name], Why: "a network needs it and it is missing (a reboot?)"})
		}
	}
	plan = append(plan, PlanRelease(after, links, mark, owned)...)
	plan = append(plan, planHealParents(after, links, mark)...)
	return append(plan, planShims(s, links, mark)...)
}

// planShims makes every missing host link of a network with a host
// address, with its routes (replacing a link of that name that carries no
// mark: a crash while it was made leaves one), heals the broken ones (down,
// without their address, another MTU) and puts the routes of the healthy
// ones back. A link of that name with another instance's mark is left
// alone.
func planShims(s Snapshot, links []kernel.Link, mark string) []Step {
	var plan []Step
	for _, name := range slices.Sorted(maps.Keys(s.Shims)) {
		sh := s.Shims[name]
		st := Step{Op: OpShim, Name: name, Shim: sh, Why: "the network's host link is missing"}
		l, ok := FindLink(links, name)
		switch {
		case !ok || l.Name != name:
		case l.Alias == "":
			st.Why = "a link of the host link's name carries no mark (left by a crash while it was made): made again"
		case l.Alias != mark:
			continue
		default:
			addr, _ := netip.ParseAddr(sh.Network.HostAddress)
			if why := BrokenBy(l, sh.Network.MTU, addr, s.ShimAddrs[name]); why != "" {
				st.Op, st.Why = OpHeal, why
			} else {
				st.Op, st.Why = OpRoutes, "the host link's routes to joined endpoints"
			}
		}
		plan = append(plan, st)
	}
	return plan
}

// ShimState is a network with a host address and the /32 routes its host
// link carries.
type ShimState struct {
	Network record.Network
	Routes  []netip.Addr
}
