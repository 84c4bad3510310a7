package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store/record"
)

func TestDecide(t *testing.T) {
	base := drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "198.18.1.0/24")
	pending := base
	pending.Pending = &record.Reservation{Token: "t", Deadline: time.Now()}
	withMTU := base
	withMTU.MTU = 1400
	withV6 := drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "198.18.1.0/24", "2001:db8:1::/64")

	for _, tc := range []struct {
		name      string
		want      record.Network
		same      *record.Network
		onParent  []record.Network
		verdict   verdict
		conflicts []string // holder IDs
		reason    string
	}{
		{name: "empty parent", want: base, verdict: VerdictCreate},
		{name: "rule 1: same ID same config", want: base, same: &base, onParent: []record.Network{base}, verdict: VerdictReuse},
		{name: "rule 1: pool order does not matter", want: drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "198.18.1.0/24", "198.18.2.0/24"),
			same: ptr(drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "198.18.2.0/24", "198.18.1.0/24")), verdict: VerdictReuse},
		{name: "rule 2: same ID other MTU", want: withMTU, same: &base, onParent: []record.Network{base}, verdict: VerdictReplace},
		{name: "rule 2: same ID other parent", want: drivertest.Macvlan(drivertest.NetA, "eth1", "bridge", "198.18.1.0/24"), same: &base, verdict: VerdictReplace},
		{name: "rule 2: same ID other IPv6", want: withV6, same: &base, verdict: VerdictReplace},
		{name: "rule 2: a pending copy is never reused", want: base, same: &pending, verdict: VerdictReplace},
		{name: "rule 2 then rule 3", want: withMTU, same: &base, onParent: []record.Network{base, drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.1.0/25")},
			verdict: VerdictReplace, conflicts: []string{drivertest.NetB}, reason: "overlaps"},
		{name: "coexist: macvlan disjoint subnets", want: base, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.2.0/24")}, verdict: VerdictCreate},
		{name: "coexist: macvlan different non-passthru modes", want: base, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "private", "198.18.2.0/24")}, verdict: VerdictCreate},
		{name: "coexist: ipvlan same mode and flag", want: drivertest.Ipvlan(drivertest.NetA, "eth0", "l3", "bridge", "198.18.1.0/24"),
			onParent: []record.Network{drivertest.Ipvlan(drivertest.NetB, "eth0", "l3", "bridge", "198.18.2.0/24")}, verdict: VerdictCreate},
		{name: "coexist: IPv6 disjoint", want: withV6, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.2.0/24", "2001:db8:2::/64")}, verdict: VerdictCreate},
		{name: "rule 3: overlap", want: base, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.0.0/16")}, conflicts: []string{drivertest.NetB}, reason: "overlaps"},
		{name: "rule 3: IPv6 overlap", want: withV6, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.9.0/24", "2001:db8:1::/48")}, conflicts: []string{drivertest.NetB}, reason: "2001:db8:1::/48"},
		{name: "rule 3: passthru holder", want: base, onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "passthru", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "passthru"},
		{name: "rule 3: passthru wanted", want: drivertest.Macvlan(drivertest.NetA, "eth0", "passthru", "198.18.1.0/24"), onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "exclusively"},
		{name: "rule 3: macvlan on ipvlan", want: base, onParent: []record.Network{drivertest.Ipvlan(drivertest.NetB, "eth0", "l2", "bridge", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "EBUSY"},
		{name: "rule 3: ipvlan on macvlan", want: drivertest.Ipvlan(drivertest.NetA, "eth0", "l2", "bridge", "198.18.1.0/24"), onParent: []record.Network{drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "EBUSY"},
		{name: "rule 3: ipvlan mode differs", want: drivertest.Ipvlan(drivertest.NetA, "eth0", "l2", "bridge", "198.18.1.0/24"), onParent: []record.Network{drivertest.Ipvlan(drivertest.NetB, "eth0", "l3", "bridge", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "ipvlan_mode=l3"},
		{name: "rule 3: ipvlan flag differs", want: drivertest.Ipvlan(drivertest.NetA, "eth0", "l2", "private", "198.18.1.0/24"), onParent: []record.Network{drivertest.Ipvlan(drivertest.NetB, "eth0", "l2", "bridge", "198.18.2.0/24")}, conflicts: []string{drivertest.NetB}, reason: "ipvlan_flag=bridge"},
		{name: "rule 3: all conflicting holders listed", want: base, onParent: []record.Network{
			drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.1.0/24"), drivertest.Macvlan(drivertest.NetC, "eth0", "bridge", "198.18.1.128/25"), drivertest.Macvlan("d", "eth0", "bridge", "198.18.3.0/24")},
			conflicts: []string{drivertest.NetB, drivertest.NetC}, reason: "overlaps"},
		{name: "rule 3: a pending holder conflicts too", want: base, onParent: []record.Network{func() record.Network {
			n := drivertest.Macvlan(drivertest.NetB, "eth0", "bridge", "198.18.1.0/24")
			n.Pending = &record.Reservation{}
			return n
		}()}, conflicts: []string{drivertest.NetB}, reason: "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.want, tc.same, tc.onParent)
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
	holder := drivertest.Macvlan(drivertest.NetB, "eth0", "passthru", "198.18.2.0/24")
	err := ConflictError(drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "198.18.1.0/24"), "eth0", []Conflict{{Holder: holder, Reason: incompatible(drivertest.Macvlan(drivertest.NetA, "eth0", "bridge"), holder)}})
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "bbbbbbbbbbbb", "eth0", "passthru", "docker network rm bbbbbbbbbbbb")
	if strings.Contains(err.Error(), drivertest.NetB) {
		t.Fatalf("error %q names the full 64-character ID, want the 12-character one", err)
	}
}

func TestConflictErrorNamesEveryHolderUpToFive(t *testing.T) {
	want := drivertest.Macvlan(drivertest.NetA, "eth0", "passthru", "198.18.100.0/24")
	want.Parent = "eth0"
	var cs []Conflict
	for i := 0; i < 7; i++ {
		h := drivertest.Macvlan(fmt.Sprintf("%012x", i+1), "eth0", "bridge", fmt.Sprintf("198.18.%d.0/24", i+1))
		cs = append(cs, Conflict{Holder: h, Reason: incompatible(want, h)})
	}
	msg := ConflictError(want, "lan0", cs).Error()
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
