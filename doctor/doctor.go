// Package doctor compares underlay's state file, the kernel's links and
// Docker's networks, and says what is wrong and what a repair would do. It
// is pure: a snapshot goes in, findings come out; the daemon carries out
// the repairs (under the same locks and rules as requests) and the CLI
// prints them.
package doctor

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Input is everything the doctor looks at.
type Input struct {
	// Now is the daemon's clock when the snapshot was taken.
	Now time.Time
	// Boot is the host's boot ID; Mark is the alias on links this
	// daemon's state file made.
	Boot, Mark string
	// Grace is how old a network record must be before Docker's "no such
	// network" is believed (libnetwork stores a network only after the
	// driver answered); the same rule as CreateNetwork's stale check.
	Grace time.Duration
	// PoolGrace is how old a pool must be before it can be unused: the
	// longest a create may take from its pool to its commit.
	PoolGrace time.Duration

	Networks  []record.Network
	Endpoints []record.Endpoint
	Owned     []record.ParentLink
	Pools     []store.IPAMPool
	Links     []kernel.Link
	// HostLinks are the host links (host_address) of networks, by network
	// ID, as the driver names them; HostLinkAddrs the addresses the kernel
	// shows on those that exist, by link name.
	HostLinks     map[string]string
	HostLinkAddrs map[string][]netip.Addr
	// LAN are the latest background LAN preflight's items by network ID.
	LAN map[string][]lancheck.Item

	// Docker is Docker's view; nil when Docker could not be asked.
	Docker *Docker
	// DockerError says why Docker could not be asked (Docker nil).
	DockerError string
}

// Docker is what Docker said.
type Docker struct {
	// Subnets are the subnets of every network Docker has (any driver).
	Subnets []netip.Prefix
	// Missing are the network IDs Docker itself answered 404 for.
	Missing map[string]bool
	// Unsure are the network IDs Docker could not be asked about.
	Unsure map[string]string
}

// Op is a repair action.
type Op string

const (
	OpRemoveStale  Op = "remove-stale-network"
	OpRecreate     Op = "recreate-parent"
	OpDeleteOrphan Op = "delete-orphan-link"
	OpRollback     Op = "rollback-reservation"
	OpReleasePool  Op = "release-pool"
)

// Finding kinds.
const (
	kindStale          = "stale-network"
	kindMissing        = "missing-parent"
	kindOrphan         = "orphan-link"
	kindExpired        = "expired-reservation"
	kindUnusedPool     = "unused-pool"
	kindGoneUserParent = "parent-gone"
)

// Action is what a repair does; the daemon checks it again under locks.
type Action struct {
	Op       Op     `json:"op"`
	Network  string `json:"network,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Link     string `json:"link,omitempty"`
	Pool     string `json:"pool,omitempty"`
}

// Finding is one thing wrong.
type Finding struct {
	// Kind names the check (stable, for scripts).
	Kind string `json:"kind"`
	// Subject is the network, endpoint, link or pool it is about.
	Subject string `json:"subject"`
	// Message says what is wrong and what it means.
	Message string `json:"message"`
	// Repair says what --repair does, or why it does nothing.
	Repair string `json:"repair"`
	// Action is the repair; nil when --repair cannot fix it.
	Action *Action `json:"action,omitempty"`
}

// Skip is a check that could not run: its findings are unknown, not
// absent. A monitor must not read a report with skips as healthy.
type Skip struct {
	// Check is the kind of finding that was not looked for
	// (stale-network, unused-pool).
	Check string `json:"check"`
	// Subject is the one network not checked; empty when the check was
	// skipped for everything.
	Subject string `json:"subject,omitempty"`
	// Reason says why, with the error that kept it from running.
	Reason string `json:"reason"`
}

// String is the skip as one line for an operator.
func (s Skip) String() string {
	if s.Subject != "" {
		return fmt.Sprintf("%s check of network %s skipped: %s", s.Check, dockerid.Short(s.Subject), s.Reason)
	}
	return fmt.Sprintf("%s check skipped: %s", s.Check, s.Reason)
}

// Check runs every comparison. skipped are the checks that could not run
// (Docker unreachable, or unsure about a network); they are not findings,
// but the report is incomplete.
func Check(in Input) (findings []Finding, skipped []Skip) {
	if in.Docker == nil {
		why := "Docker could not be asked"
		if in.DockerError != "" {
			why += " (" + in.DockerError + ")"
		}
		skipped = append(skipped,
			Skip{Check: kindStale, Reason: why + ": whether Docker still knows underlay's networks is unknown"},
			Skip{Check: kindUnusedPool, Reason: why + ": which subnets Docker's networks use is unknown"})
	} else {
		ids := make([]string, 0, len(in.Docker.Unsure))
		for id := range in.Docker.Unsure {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			skipped = append(skipped, Skip{Check: kindStale, Subject: id, Reason: fmt.Sprintf("Docker could not say whether network %s exists (%s)", dockerid.Short(id), in.Docker.Unsure[id])})
		}
	}
	findings = append(findings, staleNetworks(in)...)
	findings = append(findings, expired(in)...)
	findings = append(findings, parents(in)...)
	findings = append(findings, orphans(in)...)
	findings = append(findings, broken(in)...)
	findings = append(findings, lostLeases(in)...)
	findings = append(findings, unusedPools(in)...)
	findings = append(findings, lanProblems(in)...)
	findings = append(findings, lostInterfaces(in)...)
	return findings, skipped
}

// old reports whether a record made at created is past the grace period.
func (in Input) old(created time.Time) bool {
	return created.IsZero() || in.Now.Sub(created) >= in.Grace
}

func staleNetworks(in Input) []Finding {
	if in.Docker == nil {
		return nil
	}
	var out []Finding
	for _, n := range in.Networks {
		if n.Pending != nil || !in.Docker.Missing[n.ID] || !in.old(n.Created) {
			continue
		}
		out = append(out, Finding{Kind: kindStale, Subject: n.ID,
			Message: fmt.Sprintf("network %s (on %s) is in underlay's state but Docker does not know it: it was removed while underlay was not running, and it blocks its parent for compatible networks", dockerid.Short(n.ID), n.Parent),
			Repair:  "remove the record, its endpoints' links, its host link and its parent link if underlay created it and nothing else needs it",
			Action:  &Action{Op: OpRemoveStale, Network: n.ID}})
	}
	return out
}

func expired(in Input) []Finding {
	var out []Finding
	for _, n := range in.Networks {
		if n.Pending == nil || in.Now.Before(n.Pending.Deadline) {
			continue
		}
		out = append(out, Finding{Kind: kindExpired, Subject: n.ID,
			Message: fmt.Sprintf("network %s was being created on %s and its reservation expired at %s: the create never finished (a hung kernel call or a crash)", dockerid.Short(n.ID), n.Parent, n.Pending.Deadline.Format(time.RFC3339)),
			Repair:  "roll the reservation back (the janitor does it within seconds too)",
			Action:  &Action{Op: OpRollback, Network: n.ID}})
	}
	for _, p := range in.Pools {
		if !p.Expired(in.Now) {
			continue
		}
		out = append(out, Finding{Kind: kindExpired, Subject: p.ID,
			Message: fmt.Sprintf("IPAM pool %s (%s) was reserved for a network that was never created; the reservation expired at %s", p.ID, p.Prefix, p.Pending.Deadline.Format(time.RFC3339)),
			Repair:  "release the pool",
			Action:  &Action{Op: OpReleasePool, Pool: p.ID}})
	}
	return out
}

func parents(in Input) []Finding {
	owned := map[string]bool{}
	for _, p := range in.Owned {
		owned[p.Name] = true
	}
	var out []Finding
	seen := map[string]bool{}
	for _, n := range in.Networks {
		if n.Pending != nil || seen[n.Parent] || hasLink(in.Links, n.Parent) {
			continue
		}
		seen[n.Parent] = true
		if owned[n.Parent] {
			out = append(out, Finding{Kind: kindMissing, Subject: n.Parent,
				Message: fmt.Sprintf("parent link %s, which underlay created, is missing: containers of network %s cannot start", n.Parent, dockerid.Short(n.ID)),
				Repair:  "re-create it",
				Action:  &Action{Op: OpRecreate, Link: n.Parent}})
			continue
		}
		out = append(out, Finding{Kind: kindGoneUserParent, Subject: n.Parent,
			Message: fmt.Sprintf("parent %s of network %s does not exist on this host: containers of the network cannot start", n.Parent, dockerid.Short(n.ID)),
			Repair:  fmt.Sprintf("none: underlay does not own %s; bring the interface back, or remove and re-create the network", n.Parent)})
	}
	return out
}

func orphans(in Input) []Finding {
	recorded := map[string]bool{}
	for _, ep := range in.Endpoints {
		recorded[ep.Link] = true
	}
	for _, p := range in.Owned {
		recorded[p.Name] = true
	}
	for _, name := range in.HostLinks {
		recorded[name] = true
	}
	var out []Finding
	for _, l := range in.Links {
		if in.Mark == "" || l.Alias != in.Mark || recorded[l.Name] {
			continue
		}
		out = append(out, Finding{Kind: kindOrphan, Subject: l.Name,
			Message: fmt.Sprintf("%s link %s carries underlay's mark but no record owns it (left by a crash or a removed network)", l.Kind, l.Name),
			Repair:  "delete it",
			Action:  &Action{Op: OpDeleteOrphan, Link: l.Name}})
	}
	return out
}

func unusedPools(in Input) []Finding {
	if in.Docker == nil {
		return nil
	}
	used := map[string]bool{}
	for _, n := range in.Networks {
		for _, p := range append(append([]record.Pool{}, n.IPv4...), n.IPv6...) {
			used[p.Subnet] = true
		}
	}
	var out []Finding
	for _, p := range in.Pools {
		if p.Pending != nil || used[p.Prefix] || overlapsAny(p.Prefix, in.Docker.Subnets) || (!p.Created.IsZero() && in.Now.Sub(p.Created) < in.PoolGrace) {
			continue
		}
		out = append(out, Finding{Kind: kindUnusedPool, Subject: p.ID,
			Message: fmt.Sprintf("IPAM pool %s (%s) is allocated but no network uses it, in underlay or in Docker: its network was removed while underlay was not answering, so the subnet is never handed out again", p.ID, p.Prefix),
			Repair:  "release the pool and its addresses",
			Action:  &Action{Op: OpReleasePool, Pool: p.ID}})
	}
	return out
}

// overlapsAny reports whether a pool's prefix overlaps one of subnets (an
// unparsable prefix counts as used: never released on a guess).
func overlapsAny(prefix string, subnets []netip.Prefix) bool {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return true
	}
	for _, s := range subnets {
		if s.Overlaps(p) {
			return true
		}
	}
	return false
}

func hasLink(links []kernel.Link, name string) bool {
	for _, l := range links {
		if l.HasName(name) {
			return true
		}
	}
	return false
}

// kindLANCheck is a problem the LAN preflight found for a network.
const kindLANCheck = "lan-check"

// lanProblems are the problem items of the networks' latest LAN
// preflights, one finding each: the evidence and the fix (no repair of
// underlay's can fix a LAN), in the networks' order.
func lanProblems(in Input) []Finding {
	var out []Finding
	for _, n := range in.Networks {
		for _, it := range in.LAN[n.ID] {
			if it.Verdict != lancheck.Problem {
				continue
			}
			out = append(out, Finding{Kind: kindLANCheck, Subject: n.ID, Message: it.Name() + ": " + it.Evidence, Repair: "none by underlay: " + it.Fix})
		}
	}
	return out
}

// kindContainerInterface is a running container whose interface went
// with its parent link and is not back.
const kindContainerInterface = "container-interface"

// lostInterfaces are the endpoints joined in this boot whose interface
// was read in their container and whose parent link is missing, or is
// another link than the one the interface stood on: the kernel deleted
// the interface with its parent, and it is not back yet (the daemon makes
// it again when the parent is back, within its wait) or will not be.
func lostInterfaces(in Input) []Finding {
	nets := map[string]record.Network{}
	for _, n := range in.Networks {
		nets[n.ID] = n
	}
	var out []Finding
	for _, ep := range in.Endpoints {
		n, ok := nets[ep.NetworkID]
		if ep.Plumb == nil || ep.Sandbox == "" || ep.Boot != in.Boot || !ok {
			continue
		}
		p, found := kernel.FindLink(in.Links, n.Parent)
		if found && p.Index == ep.Plumb.ParentIndex {
			continue
		}
		state := "is missing"
		if found {
			state = fmt.Sprintf("was made again (index %d, was %d)", p.Index, ep.Plumb.ParentIndex)
		}
		out = append(out, Finding{Kind: kindContainerInterface, Subject: ep.ID,
			Message: fmt.Sprintf("the container's interface %s (sandbox %s) went with its parent link %s, which %s: the container has no network on %s", ep.Plumb.IfName, ep.Sandbox, n.Parent, state, dockerid.Short(n.ID)),
			Repair:  "none by doctor: the daemon makes it again when the parent is back (within --container-repair-wait; its log says why not); else restart the container (docker restart)"})
	}
	return out
}
