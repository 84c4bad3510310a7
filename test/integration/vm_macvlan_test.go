//go:build vm

package integration

import (
	"fmt"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// macvlan in every mode on dummy parents: the links are in the mode asked
// for; passthru takes its parent exclusively.
func TestVMMacvlanModesOnDummy(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.AddDummy("d2", 1500)
	ns.AddDummy("d3", 1500)
	var links []string
	for i, tc := range []struct {
		parent, mode string
		want         netlink.MacvlanMode
	}{
		{"d0", "private", netlink.MACVLAN_MODE_PRIVATE},
		{"d1", "vepa", netlink.MACVLAN_MODE_VEPA},
		{"d2", "passthru", netlink.MACVLAN_MODE_PASSTHRU},
		{"d3", "bridge", netlink.MACVLAN_MODE_BRIDGE},
	} {
		x := i + 1
		d.MustCreateNetwork(itest.Net{ID: vmNet(x), Opts: map[string]string{"parent": tc.parent, "macvlan_mode": tc.mode}, V4: vmPool4(x), V6: vmPool6(x)})
		j := vmJoin(d, vmNet(x), vmEp(x), vmAddr4(x, 10), vmAddr6(x, 10))
		if gw, gw6 := fmt.Sprintf("198.18.%d.1", x), fmt.Sprintf("2001:db8:%x::1", x); j.Gateway != gw || j.GatewayIPv6 != gw6 || len(j.StaticRoutes) != 0 {
			t.Fatalf("macvlan Join answered %+v, want gateways %s and %s", j, gw, gw6)
		}
		vmWantMacvlan(t, ns, vmLink(vmEp(x)), tc.parent, tc.want)
		links = append(links, vmLink(vmEp(x)))
	}
	ns.WantLinks(append(vmWith("d2", "d3"), links...)...)
	// passthru holds d2 alone.
	msg := d.CreateNetwork(itest.Net{ID: vmNet(9), Opts: map[string]string{"parent": "d2", "macvlan_mode": "passthru"}, V4: vmPool4(9)})
	vmWantRefusal(t, msg, vmNet(3), "d2", "exclusively")
	msg = d.CreateNetwork(itest.Net{ID: vmNet(9), Opts: map[string]string{"parent": "d2"}, V4: vmPool4(9)})
	vmWantRefusal(t, msg, vmNet(3), "d2", "exclusively")
	// And passthru is refused where a network already is.
	msg = d.CreateNetwork(itest.Net{ID: vmNet(9), Opts: map[string]string{"parent": "d3", "macvlan_mode": "passthru"}, V4: vmPool4(9)})
	vmWantRefusal(t, msg, vmNet(4), "d3", "exclusively")
	for x := 1; x <= 4; x++ {
		d.RemoveEndpoint(vmNet(x), vmEp(x))
		d.DeleteNetwork(vmNet(x))
	}
	ns.WantLinks(vmWith("d2", "d3")...)
	wantRecords(t, d, 0)
}
