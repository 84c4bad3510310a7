//go:build vm

package integration

import (
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// The container-side repair on links this host's kernel cannot make: a
// VLAN parent underlay owns, deleted by an operator, is made again by the
// live repair, and the macvlan container on it gets its eth0 back; an
// ipvlan l3s container (no MAC of its own: found by its address) gets its
// eth0 back, with its connected default route, when its dummy parent is
// made again.
func TestVMContainerRepairOnVLANAndIpvlan(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: vmNet(1), Opts: map[string]string{"parent": "d0.10", "address_probe": "0", "lan_check": "false"}, V4: vmPool4(61)})
	d.MustCreateNetwork(itest.Net{ID: vmNet(2), Opts: map[string]string{"parent": "d1", "ipvlan_mode": "l3s", "lan_check": "false"}, V4: vmPool4(62)})
	mv := runCtr(t, ns, d, vmNet(1), vmEp(1), vmAddr4(61, 10), "")
	iv := runCtr(t, ns, d, vmNet(2), vmEp(2), vmAddr4(62, 10), "")
	waitRead(t, d, vmEp(1))
	waitRead(t, d, vmEp(2))

	ns.Delete("d0.10")
	ns.Delete("d1")
	waitGone(t, mv.sb)
	waitGone(t, iv.sb)
	ns.AddDummy("d1", 9000)
	mv.wantEth0(t, 1500, 30*time.Second)
	iv.wantEth0(t, 9000, 30*time.Second)
	if l := ns.MustLink("d0.10"); l.Attrs().Alias == "" {
		t.Fatalf("d0.10 made again without underlay's mark")
	}
	routes, err := iv.sb.NL.RouteList(iv.sb.MustLink("eth0"), 2)
	if err != nil || len(routes) == 0 {
		t.Fatalf("ipvlan container's routes after the repair: %v (%v)", routes, err)
	}
	itest.LeaveSandbox(ns, mv.sb, "eth0", mv.hostLink)
	d.RemoveEndpoint(vmNet(1), vmEp(1))
	itest.LeaveSandbox(ns, iv.sb, "eth0", iv.hostLink)
	d.RemoveEndpoint(vmNet(2), vmEp(2))
	d.DeleteNetwork(vmNet(1))
	d.DeleteNetwork(vmNet(2))
	ns.WantLinks(vmBase...)
}
