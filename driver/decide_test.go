package driver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store"
)

func mv(id, parent, mode string, subnets ...string) store.Network {
	return rec(id, "macvlan", parent, mode, "", subnets...)
}

func iv(id, parent, mode, flag string, subnets ...string) store.Network {
	return rec(id, "ipvlan", parent, mode, flag, subnets...)
}

func rec(id, typ, parent, mode, flag string, subnets ...string) store.Network {
	n := store.Network{ID: id, Type: typ, Parent: parent, Mode: mode, Flag: flag}
	for _, s := range subnets {
		if strings.Contains(s, ":") {
			n.IPv6 = append(n.IPv6, store.Pool{Subnet: s})
		} else {
			n.IPv4 = append(n.IPv4, store.Pool{Subnet: s})
		}
	}
	return n
}

func TestDecide(t *testing.T) {
	base := mv(netA, "eth0", "bridge", "198.18.1.0/24")
	pending := base
	pending.Pending = &store.Reservation{Token: "t", Deadline: time.Now()}
	withMTU := base
	withMTU.MTU = 1400
	withV6 := mv(netA, "eth0", "bridge", "198.18.1.0/24", "2001:db8:1::/64")

	for _, tc := range []struct {
		name      string
		want      store.Network
		same      *store.Network
		onParent  []store.Network
		verdict   verdict
		conflicts []string // holder IDs
		reason    string
	}{
		{name: "empty parent", want: base, verdict: create},
		{name: "rule 1: same ID same config", want: base, same: &base, onParent: []store.Network{base}, verdict: reuse},
		{name: "rule 1: pool order does not matter", want: mv(netA, "eth0", "bridge", "198.18.1.0/24", "198.18.2.0/24"),
			same: ptr(mv(netA, "eth0", "bridge", "198.18.2.0/24", "198.18.1.0/24")), verdict: reuse},
		{name: "rule 2: same ID other MTU", want: withMTU, same: &base, onParent: []store.Network{base}, verdict: replace},
		{name: "rule 2: same ID other parent", want: mv(netA, "eth1", "bridge", "198.18.1.0/24"), same: &base, verdict: replace},
		{name: "rule 2: same ID other IPv6", want: withV6, same: &base, verdict: replace},
		{name: "rule 2: a pending copy is never reused", want: base, same: &pending, verdict: replace},
		{name: "rule 2 then rule 3", want: withMTU, same: &base, onParent: []store.Network{base, mv(netB, "eth0", "bridge", "198.18.1.0/25")},
			verdict: replace, conflicts: []string{netB}, reason: "overlaps"},
		{name: "coexist: macvlan disjoint subnets", want: base, onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.2.0/24")}, verdict: create},
		{name: "coexist: macvlan different non-passthru modes", want: base, onParent: []store.Network{mv(netB, "eth0", "private", "198.18.2.0/24")}, verdict: create},
		{name: "coexist: ipvlan same mode and flag", want: iv(netA, "eth0", "l3", "bridge", "198.18.1.0/24"),
			onParent: []store.Network{iv(netB, "eth0", "l3", "bridge", "198.18.2.0/24")}, verdict: create},
		{name: "coexist: IPv6 disjoint", want: withV6, onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.2.0/24", "2001:db8:2::/64")}, verdict: create},
		{name: "rule 3: overlap", want: base, onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.0.0/16")}, conflicts: []string{netB}, reason: "overlaps"},
		{name: "rule 3: IPv6 overlap", want: withV6, onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.9.0/24", "2001:db8:1::/48")}, conflicts: []string{netB}, reason: "2001:db8:1::/48"},
		{name: "rule 3: passthru holder", want: base, onParent: []store.Network{mv(netB, "eth0", "passthru", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "passthru"},
		{name: "rule 3: passthru wanted", want: mv(netA, "eth0", "passthru", "198.18.1.0/24"), onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "exclusively"},
		{name: "rule 3: macvlan on ipvlan", want: base, onParent: []store.Network{iv(netB, "eth0", "l2", "bridge", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "EBUSY"},
		{name: "rule 3: ipvlan on macvlan", want: iv(netA, "eth0", "l2", "bridge", "198.18.1.0/24"), onParent: []store.Network{mv(netB, "eth0", "bridge", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "EBUSY"},
		{name: "rule 3: ipvlan mode differs", want: iv(netA, "eth0", "l2", "bridge", "198.18.1.0/24"), onParent: []store.Network{iv(netB, "eth0", "l3", "bridge", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "ipvlan_mode=l3"},
		{name: "rule 3: ipvlan flag differs", want: iv(netA, "eth0", "l2", "private", "198.18.1.0/24"), onParent: []store.Network{iv(netB, "eth0", "l2", "bridge", "198.18.2.0/24")}, conflicts: []string{netB}, reason: "ipvlan_flag=bridge"},
		{name: "rule 3: all conflicting holders listed", want: base, onParent: []store.Network{
			mv(netB, "eth0", "bridge", "198.18.1.0/24"), mv(netC, "eth0", "bridge", "198.18.1.128/25"), mv("d", "eth0", "bridge", "198.18.3.0/24")},
			conflicts: []string{netB, netC}, reason: "overlaps"},
		{name: "rule 3: a pending holder conflicts too", want: base, onParent: []store.Network{func() store.Network {
			n := mv(netB, "eth0", "bridge", "198.18.1.0/24")
			n.Pending = &store.Reservation{}
			return n
		}()}, conflicts: []string{netB}, reason: "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.want, tc.same, tc.onParent)
			if got.Verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s", got.Verdict, tc.verdict)
			}
			if len(got.Conflicts) != len(tc.conflicts) {
				t.Fatalf("conflicts %+v, want holders %v", got.Conflicts, tc.conflicts)
			}
			for i, c := range got.Conflicts {
				if c.Holder.ID != tc.conflicts[i] {
					t.Fatalf("conflict %d holder %s, want %s", i, c.Holder.ID, tc.conflicts[i])
				}
				if !strings.Contains(c.Reason, tc.reason) {
					t.Fatalf("reason %q does not mention %q", c.Reason, tc.reason)
				}
			}
		})
	}
}

func TestConflictErrorNamesHolderParentReasonAndFix(t *testing.T) {
	holder := mv(netB, "eth0", "passthru", "198.18.2.0/24")
	err := conflictError(mv(netA, "eth0", "bridge", "198.18.1.0/24"), "eth0", []conflict{{Holder: holder, Reason: incompatible(mv(netA, "eth0", "bridge"), holder)}})
	wantErr(t, err, ErrConflict, "bbbbbbbbbbbb", "eth0", "passthru", "docker network rm bbbbbbbbbbbb")
	if strings.Contains(err.Error(), netB) {
		t.Fatalf("error %q names the full 64-character ID, want the 12-character one", err)
	}
}

func TestConflictErrorNamesEveryHolderUpToFive(t *testing.T) {
	want := mv(netA, "eth0", "passthru", "198.18.100.0/24")
	want.Parent = "eth0"
	var cs []conflict
	for i := 0; i < 7; i++ {
		h := mv(fmt.Sprintf("%012x", i+1), "eth0", "bridge", fmt.Sprintf("198.18.%d.0/24", i+1))
		cs = append(cs, conflict{Holder: h, Reason: incompatible(want, h)})
	}
	msg := conflictError(want, "lan0", cs).Error()
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("%012x", i+1)
		if !strings.Contains(msg, "docker network rm "+id) {
			t.Fatalf("refusal %q does not name holder %d (%s) with its fix", msg, i+1, id)
		}
	}
	for _, want := range []string{"7 networks", "and 2 more", "lan0 (kernel link eth0)"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, fmt.Sprintf("%012x", 6)) {
		t.Fatalf("refusal %q names a sixth holder", msg)
	}
}

func ptr[T any](v T) *T { return &v }
