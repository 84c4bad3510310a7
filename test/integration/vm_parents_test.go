//go:build vm

package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Parent resolution with VLANs and ipvlan links: IFACE.VID is the VLAN
// with that ID on IFACE, whatever its name; a VLAN underlay creates is
// named by the base's kernel name and the ID in decimal; an ipvlan link is
// no parent.

// vmVLANsOn returns the names of the VLAN links with the ID on base.
func vmVLANsOn(t *testing.T, ns *itest.Netns, base string, id int) []string {
	t.Helper()
	ls, err := ns.NL.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	b := ns.LinkIndex(base)
	var out []string
	for _, l := range ls {
		if v, ok := l.(*netlink.Vlan); ok && v.VlanId == id && l.Attrs().ParentIndex == b {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// vmWantOneVLAN fails unless exactly one VLAN with the ID stands on base,
// named name and carrying alias; it returns its index.
func vmWantOneVLAN(t *testing.T, ns *itest.Netns, name, base string, id int, alias string) int {
	t.Helper()
	if got := vmVLANsOn(t, ns, base, id); len(got) != 1 || got[0] != name {
		t.Fatalf("VLAN %d on %s: links %v, want exactly [%s]", id, base, got, name)
	}
	idx := vmWantVLAN(t, ns, name, base, id)
	if got := ns.MustLink(name).Attrs().Alias; got != alias {
		t.Fatalf("VLAN link %s carries alias %q, want %q", name, got, alias)
	}
	return idx
}

// A VLAN the user made under a name of their own (uv20, VLAN 20 on d0) is
// what -o parent=d0.20 means: the network uses it, no second VLAN 20 link
// appears, the conflict rules decide on it, and it is never deleted.
func TestVMParentUserVLANUnderOtherNameUsed(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.AddVLAN("uv20", "d0", 20)
	idx := vmWantOneVLAN(t, ns, "uv20", "d0", 20, "")
	a, b := vmNet(1), vmNet(2)
	na := itest.Net{ID: a, Opts: map[string]string{"parent": "d0.20"}, V4: vmPool4(1)}
	d.MustCreateNetwork(na)
	vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), "uv20", netlink.MACVLAN_MODE_BRIDGE)
	ns.WantLinks(vmWith("uv20", vmLink(vmEp(1)))...)
	if got := vmWantOneVLAN(t, ns, "uv20", "d0", 20, ""); got != idx {
		t.Fatalf("uv20 re-created (index %d, was %d)", got, idx)
	}

	// Asked as d0.20, d0.020 or uv20, it is one parent.
	for _, p := range []string{"d0.20", "d0.020"} {
		wantCreateRefused(t, d, itest.Net{ID: b, Opts: map[string]string{"parent": p, "macvlan_mode": "passthru"}, V4: vmPool4(2)}, http.StatusConflict,
			"parent "+p+" (kernel link uv20)", "network "+a[:12], "exclusively", "docker network rm "+a[:12])
	}
	wantCreateRefused(t, d, itest.Net{ID: b, Opts: map[string]string{"parent": "uv20"}, V4: []string{"198.18.1.128/25"}}, http.StatusConflict,
		"parent uv20 is already used by network "+a[:12], "overlaps")
	ns.WantLinks(vmWith("uv20", vmLink(vmEp(1)))...)

	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.020", "macvlan_mode": "private"}, V4: vmPool4(2)})
	vmJoin(d, b, vmEp(2), vmAddr4(2, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), "uv20", netlink.MACVLAN_MODE_PRIVATE)
	ns.WantLinks(vmWith("uv20", vmLink(vmEp(1)), vmLink(vmEp(2)))...)
	s := wantState(t, d, 2, a, b)
	for _, n := range []string{a, b} {
		if p := s.Networks[n].Parent; p != "uv20" {
			t.Fatalf("network %s stored on link %s, want uv20", n[:12], p)
		}
	}
	if len(s.Parents) != 0 {
		t.Fatalf("underlay owns parent links %v, want none (uv20 is the user's)", s.Parents)
	}

	// A restart keeps it, and Docker's replay is the same network.
	d.Restart()
	d.MustCreateNetwork(na)
	ns.WantLinks(vmWith("uv20", vmLink(vmEp(1)), vmLink(vmEp(2)))...)

	d.RemoveEndpoint(a, vmEp(1))
	d.DeleteNetwork(a)
	d.DeleteNetwork(b) // its endpoint still joined
	ns.WantLinks(vmWith("uv20")...)
	if got := vmWantOneVLAN(t, ns, "uv20", "d0", 20, ""); got != idx {
		t.Fatalf("uv20 re-created (index %d, was %d)", got, idx)
	}
	d.Restart()
	ns.WantLinks(vmWith("uv20")...)
	wantState(t, d, 0)
}

// parent=d0.010 is VLAN 10 on d0: underlay creates it as d0.10, marked as
// its own; d0.10, d0.0010 and lan0.10 (lan0 an altname of d0) are the same
// parent, shared under the conflict rules; it is deleted with the last
// network on it.
func TestVMParentVLANIDInDecimal(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	if err := ns.NL.LinkAddAltName(ns.MustLink("d0"), "lan0"); err != nil {
		t.Fatalf("add altname lan0 to d0: %v", err)
	}
	mark := instanceMark(t, d)
	a, b, c, x := vmNet(1), vmNet(2), vmNet(3), vmNet(9)
	na := itest.Net{ID: a, Opts: map[string]string{"parent": "d0.010"}, V4: vmPool4(1)}
	d.MustCreateNetwork(na)
	ns.WantLinks(vmWith("d0.10")...)
	idx := vmWantOneVLAN(t, ns, "d0.10", "d0", 10, mark)
	vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), "d0.10", netlink.MACVLAN_MODE_BRIDGE)

	// A second network on d0.10 shares the link.
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.10", "macvlan_mode": "private"}, V4: vmPool4(2)})
	vmJoin(d, b, vmEp(2), vmAddr4(2, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), "d0.10", netlink.MACVLAN_MODE_PRIVATE)
	if got := vmWantOneVLAN(t, ns, "d0.10", "d0", 10, mark); got != idx {
		t.Fatalf("d0.10 re-created (index %d, was %d) for a second network", got, idx)
	}

	// The rules hold whichever spelling asks.
	wantCreateRefused(t, d, itest.Net{ID: x, Opts: map[string]string{"parent": "d0.10", "macvlan_mode": "passthru"}, V4: vmPool4(9)}, http.StatusConflict,
		"parent d0.10 is already used by 2 networks", "network "+a[:12], "network "+b[:12], "exclusively")
	wantCreateRefused(t, d, itest.Net{ID: x, Opts: map[string]string{"parent": "d0.0010"}, V4: []string{"198.18.1.128/25"}}, http.StatusConflict,
		"parent d0.0010 (kernel link d0.10) is already used by network "+a[:12], "overlaps", "docker network rm "+a[:12])
	wantCreateRefused(t, d, itest.Net{ID: x, Opts: map[string]string{"parent": "lan0.10", "type": "ipvlan"}, V4: vmPool4(9)}, http.StatusConflict,
		"parent lan0.10 (kernel link d0.10)", "never both")
	ns.WantLinks(vmWith("d0.10", vmLink(vmEp(1)), vmLink(vmEp(2)))...)

	// lan0.10 is d0.10 too, and lan0.30 creates d0.30, not lan0.30.
	d.MustCreateNetwork(itest.Net{ID: c, Opts: map[string]string{"parent": "lan0.10", "macvlan_mode": "vepa"}, V4: vmPool4(3)})
	vmJoin(d, c, vmEp(3), vmAddr4(3, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(3)), "d0.10", netlink.MACVLAN_MODE_VEPA)
	d.MustCreateNetwork(itest.Net{ID: x, Opts: map[string]string{"parent": "lan0.30"}, V4: vmPool4(9)})
	vmWantOneVLAN(t, ns, "d0.30", "d0", 30, mark)
	ns.WantLinks(vmWith("d0.10", "d0.30", vmLink(vmEp(1)), vmLink(vmEp(2)), vmLink(vmEp(3)))...)
	s := wantState(t, d, 3, a, b, c, x)
	for n, want := range map[string]string{a: "d0.10", b: "d0.10", c: "d0.10", x: "d0.30"} {
		if p := s.Networks[n].Parent; p != want {
			t.Fatalf("network %s stored on link %s, want %s", n[:12], p, want)
		}
	}
	if p, ok := s.Parents["d0.10"]; !ok || p.Base != "d0" || p.VLAN != 10 || len(s.Parents) != 2 {
		t.Fatalf("owned parent links %+v, want d0.10 (VLAN 10 on d0) and d0.30", s.Parents)
	}

	// After a kill -9, Docker's replay of d0.010 is the same network.
	d.Restart()
	d.MustCreateNetwork(na)
	if got := vmWantOneVLAN(t, ns, "d0.10", "d0", 10, mark); got != idx {
		t.Fatalf("d0.10 re-created (index %d, was %d) by the restart", got, idx)
	}

	d.DeleteNetwork(x)
	ns.WantLinks(vmWith("d0.10", vmLink(vmEp(1)), vmLink(vmEp(2)), vmLink(vmEp(3)))...)
	d.RemoveEndpoint(a, vmEp(1))
	d.DeleteNetwork(a)
	d.DeleteNetwork(c)
	if got := vmWantOneVLAN(t, ns, "d0.10", "d0", 10, mark); got != idx {
		t.Fatalf("d0.10 re-created (index %d, was %d) while network %s uses it", got, idx, b[:12])
	}
	d.DeleteNetwork(b)
	ns.WantLinks(vmBase...)
	wantState(t, d, 0)
}

// Two (then three) networks asking for VLAN 30 on d0 by different
// spellings at once: one VLAN 30 link, d0.30, at the end, and every request
// either succeeded on it or was refused with a clear message and left
// nothing; the state agrees with the kernel. Repeated to meet the race.
func TestVMParentVLANSpellingsConcurrently(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	if err := ns.NL.LinkAddAltName(ns.MustLink("d0"), "lan0"); err != nil {
		t.Fatalf("add altname lan0 to d0: %v", err)
	}
	mark := instanceMark(t, d)
	spellings := []string{"d0.30", "d0.030", "lan0.30"}
	both, refused := 0, 0
	for round := 0; round < 8; round++ {
		k := 2 + round%2 // two spellings, then three
		ids := make([]string, k)
		for i := range ids {
			ids[i] = vmNet(100*round + i + 1)
		}
		msgs := itest.Concurrently(k, func(i int) string {
			return d.CreateNetwork(itest.Net{ID: ids[i], Opts: map[string]string{"parent": spellings[i]}, V4: vmPool4(10*round + i + 1)})
		})
		var ok []string
		for i, msg := range msgs {
			switch {
			case msg == "":
				ok = append(ok, ids[i])
			case strings.Contains(msg, "retry") && (strings.Contains(msg, "d0.30") || strings.Contains(msg, spellings[i])):
				refused++
				t.Logf("round %d: create on %s refused: %s", round, spellings[i], msg)
			default:
				t.Fatalf("round %d: create on %s answered %q: want success, or a refusal that says what happened and to retry", round, spellings[i], msg)
			}
		}
		if len(ok) == 0 {
			t.Fatalf("round %d: every create refused: %q", round, msgs)
		}
		if len(ok) == k {
			both++
		}
		ns.WantLinks(vmWith("d0.30")...)
		vmWantOneVLAN(t, ns, "d0.30", "d0", 30, mark)
		s := wantState(t, d, 0, ok...)
		for _, n := range ok {
			if p := s.Networks[n].Parent; p != "d0.30" {
				t.Fatalf("round %d: network %s stored on link %s, want d0.30", round, n[:12], p)
			}
		}
		if p, owned := s.Parents["d0.30"]; !owned || p.VLAN != 30 || p.Base != "d0" || len(s.Parents) != 1 {
			t.Fatalf("round %d: owned parent links %+v, want d0.30 (VLAN 30 on d0)", round, s.Parents)
		}
		// The networks work: an endpoint on each hangs off d0.30.
		for i, n := range ok {
			vmJoin(d, n, vmEp(100*round+i+1), vmAddr4(10*round+indexOf(ids, n)+1, 10), "")
			vmWantMacvlan(t, ns, vmLink(vmEp(100*round+i+1)), "d0.30", netlink.MACVLAN_MODE_BRIDGE)
		}
		for _, n := range ok {
			d.DeleteNetwork(n)
		}
		ns.WantLinks(vmBase...)
		wantState(t, d, 0)
	}
	t.Logf("8 rounds: %d with every create accepted, %d creates refused", both, refused)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// An ipvlan link as parent is refused with 400 naming its lower link, as a
// macvlan one is (host suite); nothing is created.
func TestVMParentIpvlanLinkRefused(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	if err := ns.NL.LinkAdd(&netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "ivx", ParentIndex: ns.LinkIndex("d0")}, Mode: netlink.IPVLAN_MODE_L2}); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []map[string]string{
		{"parent": "ivx", "type": "ipvlan"},
		{"parent": "ivx"},
		{"parent": "ivx.10"},
	} {
		wantCreateRefused(t, d, itest.Net{ID: vmNet(1), Opts: opts, V4: vmPool4(1)}, http.StatusBadRequest,
			"parent ivx is a ipvlan link on d0", "-o parent=d0")
		ns.WantLinks(vmWith("ivx")...)
	}
	wantState(t, d, 0)
}

// The name underlay would give VLAN 10 on d0 (d0.10) taken by a link that
// is not that VLAN (a dummy, or VLAN 11 on d1 misnamed d0.11): asking for
// d0.010 (d0.011) is refused naming the link, which is left alone and never
// recorded as underlay's.
func TestVMParentVLANNameTakenByAnotherLink(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.AddDummy("d0.10", 1500)
	ns.AddVLAN("d0.11", "d1", 11)
	before := linkStates(t, ns, "d0.10", "d0.11")
	for asked, link := range map[string]string{"d0.010": "d0.10", "d0.011": "d0.11"} {
		code, msg := createAnswer(t, d, itest.Net{ID: vmNet(1), Opts: map[string]string{"parent": asked}, V4: vmPool4(1)})
		if code != http.StatusBadRequest || !strings.Contains(msg, link) || !strings.Contains(msg, "exists") {
			t.Fatalf("parent=%s with another link named %s answered %d %q: want a refusal saying %s exists", asked, link, code, msg, link)
		}
		t.Logf("parent=%s answered %d %q", asked, code, msg)
	}
	wantSame(t, ns, "the refused creates", before)
	if got := vmVLANsOn(t, ns, "d0", 10); len(got) != 0 {
		t.Fatalf("VLAN 10 on d0: %v, want none", got)
	}
	ns.WantLinks(vmWith("d0.10", "d0.11")...)
	if s := wantState(t, d, 0); len(s.Parents) != 0 {
		t.Fatalf("after the refused creates underlay owns parent links %v, want none", s.Parents)
	}
	d.Restart()
	wantSame(t, ns, "the restart", before)
}
