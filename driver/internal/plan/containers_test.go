package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

func TestPlanContainers(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	const wait = time.Minute
	n := record.Network{ID: "n1", Parent: "eth0", Type: kernel.KindMacvlan}
	joined := func(id string, idx, mtu int) Plumbed {
		return Plumbed{Network: n, Endpoint: record.Endpoint{ID: id, Sandbox: "/run/netns/" + id, Boot: "b1",
			Plumb: &record.Plumb{IfName: "eth0", MTU: mtu, ParentIndex: idx}}}
	}
	eth0 := func(idx, mtu int) kernel.Link {
		return kernel.Link{Name: "eth0", Index: idx, Kind: "veth", MTU: mtu, Encap: "ether"}
	}
	tun := kernel.Link{Name: "eth0", Index: 9, Kind: "tun", MTU: 1500, Encap: "none"}
	cases := []struct {
		name    string
		ep      Plumbed
		links   []kernel.Link
		lost    map[string]Lost
		op      string // the step's op, "" for none
		problem string // a part of the step's Problem
		remem   *Lost  // what the next pass remembers
		next    time.Time
	}{
		{name: "parent as it was: nothing", ep: joined("e", 3, 1500), links: []kernel.Link{eth0(3, 1500)}},
		{name: "parent made again: made again", ep: joined("e", 3, 1500), links: []kernel.Link{eth0(7, 1500)}, op: "container"},
		{name: "parent missing: waited for", ep: joined("e", 3, 1500), remem: &Lost{Since: now}, next: now.Add(wait)},
		{name: "still missing within the wait", ep: joined("e", 3, 1500), lost: map[string]Lost{"e": {Since: now.Add(-30 * time.Second)}},
			remem: &Lost{Since: now.Add(-30 * time.Second)}, next: now.Add(30 * time.Second)},
		{name: "missing past the wait: abandoned", ep: joined("e", 3, 1500), lost: map[string]Lost{"e": {Since: now.Add(-wait)}}, op: "abandon"},
		{name: "given up: left alone when it is back", ep: joined("e", 3, 1500), links: []kernel.Link{eth0(7, 1500)},
			lost: map[string]Lost{"e": {GaveUp: true}}, remem: &Lost{GaveUp: true}},
		{name: "back with a lower MTU: a problem", ep: joined("e", 3, 9000), links: []kernel.Link{eth0(7, 1500)}, op: "container",
			problem: "came back with MTU 1500, below the container's interface's 9000"},
		{name: "back as a tun: a problem", ep: joined("e", 3, 1500), links: []kernel.Link{tun}, op: "container", problem: "without Ethernet"},
		{name: "failed on the parent as it is: not again", ep: joined("e", 3, 9000), links: []kernel.Link{eth0(7, 1500)},
			lost: map[string]Lost{"e": {Failed: Attempt(eth0(7, 1500))}}, remem: &Lost{Failed: Attempt(eth0(7, 1500))}},
		{name: "failed, then the parent changed: tried again", ep: joined("e", 3, 9000), links: []kernel.Link{eth0(7, 9000)},
			lost: map[string]Lost{"e": {Failed: Attempt(eth0(7, 1500))}}, op: "container"},
		{name: "parent renamed (its index is there): nothing", ep: joined("e", 3, 1500),
			links: []kernel.Link{{Name: "lan0", Index: 3, Kind: "veth", MTU: 1500, Encap: "ether"}}},
		{name: "joined in another boot: nothing", ep: func() Plumbed { p := joined("e", 3, 1500); p.Endpoint.Boot = "b0"; return p }(),
			links: []kernel.Link{eth0(7, 1500)}},
		{name: "not read in its container: nothing", ep: func() Plumbed { p := joined("e", 3, 1500); p.Endpoint.Plumb = nil; return p }(),
			links: []kernel.Link{eth0(7, 1500)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanContainers([]Plumbed{c.ep}, c.links, c.lost, "b1", now, wait)
			var op, problem string
			if len(p.Steps) > 1 {
				t.Fatalf("steps %v", p.Steps)
			}
			if len(p.Steps) == 1 {
				op, problem = p.Steps[0].Op.String(), p.Steps[0].Problem
			}
			if op != c.op || (c.problem == "") != (problem == "") || !strings.Contains(problem, c.problem) {
				t.Fatalf("step %q problem %q, want %q with %q", op, problem, c.op, c.problem)
			}
			got, ok := p.Remember["e"]
			if (c.remem == nil) == ok || (ok && got != *c.remem) {
				t.Fatalf("remembers %+v (%v), want %+v", got, ok, c.remem)
			}
			if !p.Next.Equal(c.next) {
				t.Fatalf("next pass at %v, want %v", p.Next, c.next)
			}
			if c.ep.Endpoint.Plumb != nil && c.ep.Endpoint.Boot == "b1" && !p.Parents["eth0"] {
				t.Fatalf("parents watched %v, want eth0", p.Parents)
			}
		})
	}
}
