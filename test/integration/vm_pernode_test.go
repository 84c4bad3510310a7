//go:build vm

package integration

import (
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Per-node parents with VLANs: a candidate IFACE.VID counts when IFACE
// exists (the VLAN is created, owned and deleted as for a plain IFACE.VID),
// and auto.VID makes VLAN VID on the link auto picks, or takes the picked
// link when it is that VLAN.
func TestVMPerNodeVLANParents(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.Up("d1")
	ns.AddAddr("d1", "198.18.60.2/24") // d1's connected route holds 198.18.60.0/24
	a, b, c := vmNet(1), vmNet(2), vmNet(3)

	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "ens3.10,d0.10"}, V4: vmPool4(1)})
	vmWantVLAN(t, ns, "d0.10", "d0", 10)
	vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), "d0.10", netlink.MACVLAN_MODE_BRIDGE)

	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "auto.20"}, V4: []string{"198.18.60.0/25,198.18.60.1/24"}})
	vmWantVLAN(t, ns, "d1.20", "d1", 20)
	vmJoin(d, b, vmEp(2), "198.18.60.10/25", "")
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), "d1.20", netlink.MACVLAN_MODE_BRIDGE)

	// The host's address on d0.10 puts the subnet's route on the VLAN:
	// auto.10 is that VLAN, shared with network a.
	ns.AddAddr("d0.10", "198.18.61.2/24")
	d.MustCreateNetwork(itest.Net{ID: c, Opts: map[string]string{"parent": "auto.10", "macvlan_mode": "private"}, V4: []string{"198.18.61.0/25,198.18.61.1/24"}})
	vmJoin(d, c, vmEp(3), "198.18.61.10/25", "")
	vmWantMacvlan(t, ns, vmLink(vmEp(3)), "d0.10", netlink.MACVLAN_MODE_PRIVATE)
	ns.WantLinks(vmWith("d0.10", "d1.20", vmLink(vmEp(1)), vmLink(vmEp(2)), vmLink(vmEp(3)))...)
	s := wantState(t, d, 3, a, b, c)
	if n := s.Networks[b]; n.Parent != "d1.20" || n.Options["parent"] != "auto.20" {
		t.Fatalf("network b stored on %q with option %q, want d1.20 and auto.20", n.Parent, n.Options["parent"])
	}
	for _, id := range []string{a, b, c} {
		d.DeleteNetwork(id)
	}
	ns.WantLinks(vmBase...)
	wantRecords(t, d, 0)
}
