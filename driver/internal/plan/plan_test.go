package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

const testMark = "underlay:me"

func vlanRec(name, base string, vid int) record.ParentLink {
	return record.ParentLink{Name: name, Kind: kernel.KindVLAN, Base: base, VLAN: vid}
}

// kernel builds a link list: eth0 plus the given links, each "name" or
// "name@lower" (stacked on lower), with alias after "#".
func dumpedLinks(specs ...string) []kernel.Link {
	links := []kernel.Link{{Name: "lo", Index: 1, Kind: "device"}, {Name: "eth0", Index: 2, Kind: "device"}}
	for _, s := range specs {
		var name, lower, alias string
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s, alias = s[:i], s[i+1:]
		}
		if i := strings.IndexByte(s, '@'); i >= 0 {
			name, lower = s[:i], s[i+1:]
		} else {
			name = s
		}
		l := kernel.Link{Name: name, Index: len(links) + 1, Kind: kernel.KindVLAN, Alias: alias}
		if lower != "" {
			p, _ := FindLink(links, lower)
			l.ParentIndex = p.Index
		}
		if len(name) == 15 && name[:3] == config.EndpointPrefix {
			l.Kind = "macvlan"
		}
		links = append(links, l)
	}
	return links
}

func owned(ps ...record.ParentLink) map[string]record.ParentLink {
	m := map[string]record.ParentLink{}
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func pendingOn(id, parent string) record.Network {
	n := drivertest.Macvlan(id, parent, "bridge")
	n.Pending = &record.Reservation{Token: "t", Deadline: time.Now()}
	return n
}

func TestPlanRestore(t *testing.T) {
	m := "#" + testMark
	for _, tc := range []struct {
		name  string
		snap  Snapshot
		links []kernel.Link
		want  string
	}{
		{name: "nothing to do",
			snap:  Snapshot{Use: map[string]int{"eth0.10": 1}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0" + m), want: "[]"},
		{name: "needed VLAN missing after a reboot is re-created",
			snap: Snapshot{Use: map[string]int{"eth0.10": 1}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			want: "[recreate eth0.10]"},
		{name: "VLAN on a VLAN: the base is re-created first",
			snap: Snapshot{Use: map[string]int{"eth0.10.20": 1}, Owned: owned(vlanRec("eth0.10.20", "eth0.10", 20), vlanRec("eth0.10", "eth0", 10))},
			want: "[recreate eth0.10 recreate eth0.10.20]"},
		{name: "pending network rolled back and its VLAN released",
			snap:  Snapshot{Pending: []record.Network{pendingOn(drivertest.NetA, "eth0.10")}, Use: map[string]int{"eth0.10": 1}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0" + m), want: "[rollback " + drivertest.NetA + " release eth0.10]"},
		{name: "pending network on a VLAN another network still uses",
			snap:  Snapshot{Pending: []record.Network{pendingOn(drivertest.NetA, "eth0.10")}, Use: map[string]int{"eth0.10": 2}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0" + m), want: "[rollback " + drivertest.NetA + "]"},
		{name: "unneeded stack released top down",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10), vlanRec("eth0.10.20", "eth0.10", 20))},
			links: dumpedLinks("eth0.10@eth0"+m, "eth0.10.20@eth0.10"+m), want: "[release eth0.10.20 release eth0.10]"},
		{name: "unneeded VLAN kept while a link underlay did not make stands on it",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0"+m, "admin5@eth0.10"), want: "[keep eth0.10]"},
		{name: "unneeded VLAN gone: forgotten",
			snap: Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			want: "[forget eth0.10]"},
		{name: "unneeded VLAN now marked by another instance: forgotten, never deleted",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0#underlay:other"), want: "[forget eth0.10]"},
		{name: "unneeded VLAN of a version before marks: released (recorded, unmarked)",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0"), want: "[release eth0.10]"},
		{name: "strays: only links with this instance's mark and no record",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(), EndpointLinks: map[string]bool{"ule00000000000a": true}},
			links: dumpedLinks("ule00000000000a@eth0"+m, "ule00000000000b@eth0"+m, "ule00000000000c@eth0", "ule00000000000d@eth0#underlay:other"),
			want:  "[delete-stray ule00000000000b]"},
		{name: "networks recorded on an altname move to the kernel name",
			snap:  Snapshot{Use: map[string]int{"lan0": 2, "eth0": 1}, Owned: owned()},
			links: func() []kernel.Link { l := dumpedLinks(); l[1].AltNames = []string{"lan0"}; return l }(),
			want:  "[repoint lan0->eth0]"},
		{name: "a parent recorded by a name no link has is left to the next request",
			snap: Snapshot{Use: map[string]int{"gone0": 1}, Owned: owned()}, want: "[]"},
		{name: "a marked stray on an unneeded VLAN goes first, then the VLAN",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned(vlanRec("eth0.10", "eth0", 10))},
			links: dumpedLinks("eth0.10@eth0"+m, "ule00000000000b@eth0.10"+m), want: "[delete-stray ule00000000000b release eth0.10]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := tc.links
			if links == nil {
				links = dumpedLinks()
			}
			if got := fmt.Sprint(PlanRestore(tc.snap, links, testMark)); got != tc.want {
				t.Fatalf("plan %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPlanRelease(t *testing.T) {
	m := "#" + testMark
	stack := owned(vlanRec("eth0.10", "eth0", 10), vlanRec("eth0.10.20", "eth0.10", 20), vlanRec("eth0.10.30", "eth0.10", 30))
	links := dumpedLinks("eth0.10@eth0"+m, "eth0.10.20@eth0.10"+m, "eth0.10.30@eth0.10"+m)
	for _, tc := range []struct {
		name       string
		use        map[string]int
		candidates []string
		want       string
	}{
		{name: "still used", use: map[string]int{"eth0.10.20": 1}, candidates: []string{"eth0.10.20"}, want: "[]"},
		{name: "last user gone: the VLAN, then its unneeded sibling first, then the base",
			use: map[string]int{}, candidates: []string{"eth0.10.20"}, want: "[release eth0.10.20 release eth0.10.30 release eth0.10]"},
		{name: "a sibling is used: only the VLAN goes, the base stays",
			use: map[string]int{"eth0.10.30": 1}, candidates: []string{"eth0.10.20"}, want: "[release eth0.10.20]"},
		{name: "the base is used by a network itself", use: map[string]int{"eth0.10": 1},
			candidates: []string{"eth0.10.20"}, want: "[release eth0.10.20]"},
		{name: "a link underlay does not own is never a candidate", use: map[string]int{}, candidates: []string{"eth0"}, want: "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Use: tc.use, Owned: stack}
			if got := fmt.Sprint(PlanRelease(s, links, testMark, tc.candidates)); got != tc.want {
				t.Fatalf("plan %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOwnsLink(t *testing.T) {
	for _, tc := range []struct {
		alias    string
		recorded bool
		want     bool
	}{
		{testMark, false, true}, {testMark, true, true},
		{"", true, true}, {"", false, false},
		{"underlay:other", true, false}, {"an administrator's note", true, false},
	} {
		if got := OwnsLink(kernel.Link{Name: "x", Alias: tc.alias}, testMark, tc.recorded); got != tc.want {
			t.Errorf("ownsLink(alias %q, recorded %v) = %v, want %v", tc.alias, tc.recorded, got, tc.want)
		}
	}
}

// TestOpsAreClassified: every op (every name opNames gives) is a restore
// op or a container op, never both, so the lists the metrics are held to
// (driver's TestMetricsZeroSeriesAreThePlannersOps) grow with the ops.
func TestOpsAreClassified(t *testing.T) {
	seen := map[op]int{}
	for _, o := range append(RestoreOps(), ContainerOps()...) {
		seen[o]++
	}
	for i, name := range opNames() {
		if o := op(i); seen[o] != 1 {
			t.Errorf("op %s is in %d of RestoreOps and ContainerOps, want exactly 1", name, seen[o])
		}
	}
	if len(seen) != len(opNames()) {
		t.Errorf("RestoreOps and ContainerOps hold %d ops, opNames names %d", len(seen), len(opNames()))
	}
	if got := op(len(opNames())).String(); got != fmt.Sprintf("op(%d)", len(opNames())) {
		t.Errorf("an op without a name prints %q", got)
	}
}
