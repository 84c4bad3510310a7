package plan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// hostNet is a network with a host address, as the planners see it.
func hostNet(id, parent, addr string, mtu int) ShimState {
	return ShimState{Network: record.Network{ID: id, Parent: parent, HostAddress: addr, MTU: mtu}}
}

func TestPlanHealth(t *testing.T) {
	vlan := func(name string, vid int, alias string, down bool, mtu int) kernel.Link {
		return kernel.Link{Name: name, Index: 10 + vid, Kind: kernel.KindVLAN, ParentIndex: 2, VLAN: vid, Alias: alias, Down: down, MTU: mtu}
	}
	shimL := func(id, alias string, down bool, mtu int) kernel.Link {
		return kernel.Link{Name: config.ShimName(id), Index: 99, Kind: "macvlan", ParentIndex: 2, Alias: alias, Down: down, MTU: mtu}
	}
	base := dumpedLinks()
	with := func(ls ...kernel.Link) []kernel.Link {
		return append(append([]kernel.Link(nil), base...), ls...)
	}
	used := map[string]int{"eth0.10": 1}
	rec := owned(vlanRec("eth0.10", "eth0", 10))
	sh := config.ShimName(drivertest.NetA)
	addr := map[string][]netip.Addr{sh: {netip.MustParseAddr("198.18.1.5")}}
	for _, tc := range []struct {
		name  string
		snap  Snapshot
		links []kernel.Link
		want  string
	}{
		{name: "a needed owned VLAN set down is healed",
			snap: Snapshot{Use: used, Owned: rec}, links: with(vlan("eth0.10", 10, testMark, true, 1500)), want: "[heal eth0.10]"},
		{name: "an owned VLAN with another MTU than recorded is healed",
			snap:  Snapshot{Use: used, Owned: owned(record.ParentLink{Name: "eth0.10", Kind: kernel.KindVLAN, Base: "eth0", VLAN: 10, MTU: 1400})},
			links: with(vlan("eth0.10", 10, testMark, false, 1500)), want: "[heal eth0.10]"},
		{name: "an owned VLAN nothing needs is released, not healed",
			snap: Snapshot{Use: map[string]int{}, Owned: rec}, links: with(vlan("eth0.10", 10, testMark, true, 1500)), want: "[release eth0.10]"},
		{name: "a down VLAN of another instance is not touched",
			snap: Snapshot{Use: used, Owned: rec}, links: with(vlan("eth0.10", 10, "underlay:other", true, 1500)), want: "[]"},
		{name: "an owned VLAN renamed: the record follows, nothing is made or deleted",
			snap: Snapshot{Use: used, Owned: rec}, links: with(vlan("mine", 10, testMark, false, 1500)), want: "[follow eth0.10->mine]"},
		{name: "renamed and set down: followed, then healed under its new name",
			snap: Snapshot{Use: used, Owned: rec}, links: with(vlan("mine", 10, testMark, true, 1500)), want: "[follow eth0.10->mine heal mine]"},
		{name: "a VLAN of the same ID with another mark is not ours to follow",
			snap: Snapshot{Use: used, Owned: rec}, links: with(vlan("mine", 10, "underlay:other", false, 1500)), want: "[recreate eth0.10]"},
		{name: "a marked unrecorded link others stand on is kept, not deleted",
			snap:  Snapshot{Use: map[string]int{}, Owned: owned()},
			links: with(vlan("v7", 7, testMark, false, 1500), kernel.Link{Name: "user7", Index: 50, Kind: "macvlan", ParentIndex: 17}),
			want:  "[keep v7]"},
		{name: "a healthy host link: its routes",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 0)}, ShimAddrs: addr},
			links: with(shimL(drivertest.NetA, testMark, false, 1500)), want: "[routes " + sh + "]"},
		{name: "a host link set down is healed",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 0)}, ShimAddrs: addr},
			links: with(shimL(drivertest.NetA, testMark, true, 1500)), want: "[heal " + sh + "]"},
		{name: "a host link without its address is healed",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 0)}},
			links: with(shimL(drivertest.NetA, testMark, false, 1500)), want: "[heal " + sh + "]"},
		{name: "a host link with another MTU than the network's is healed",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 1400)}, ShimAddrs: addr},
			links: with(shimL(drivertest.NetA, testMark, false, 1500)), want: "[heal " + sh + "]"},
		{name: "an unmarked link of the host link's name (a crash while making it) is made again",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 0)}, ShimAddrs: addr},
			links: with(shimL(drivertest.NetA, "", false, 1500)), want: "[shim " + sh + "]"},
		{name: "a link of the host link's name with another instance's mark is left alone",
			snap:  Snapshot{Use: map[string]int{"eth0": 1}, Owned: owned(), Shims: map[string]ShimState{sh: hostNet(drivertest.NetA, "eth0", "198.18.1.5", 0)}, ShimAddrs: addr},
			links: with(shimL(drivertest.NetA, "underlay:other", false, 1500)), want: "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanRestore(tc.snap, tc.links, testMark)
			if got := fmt.Sprint(plan); got != tc.want {
				t.Fatalf("plan %s, want %s", got, tc.want)
			}
			// A repair pass takes the same steps, less the routes.
			var repair []string
			for _, st := range PlanRepair(tc.snap, tc.links, testMark) {
				if st.Op != OpRoutes {
					repair = append(repair, st.String())
				}
			}
			for _, st := range repair {
				if !strings.Contains(tc.want, st) {
					t.Fatalf("repair step %s not in the restore plan %s", st, tc.want)
				}
			}
		})
	}
}
