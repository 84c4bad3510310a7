//go:build vm

package integration

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// parent=<if>.<vid> that does not exist: underlay creates the VLAN link
// with that ID on that base, networks share it, and it is deleted with the
// last network on it, not before.
func TestVMVLANParentCreatedSharedAndDeleted(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	a, b, c := vmNet(1), vmNet(2), vmNet(3)
	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(1), V6: vmPool6(1)})
	idx := vmWantVLAN(t, ns, "d0.10", "d0", 10)
	vmJoin(d, a, vmEp(1), vmAddr4(1, 10), vmAddr6(1, 10))
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), "d0.10", netlink.MACVLAN_MODE_BRIDGE)

	// A second network on the same VLAN uses the same link.
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.10", "macvlan_mode": "private"}, V4: vmPool4(2)})
	if got := vmWantVLAN(t, ns, "d0.10", "d0", 10); got != idx {
		t.Fatalf("d0.10 re-created (index %d, was %d) for a second network", got, idx)
	}
	vmJoin(d, b, vmEp(2), vmAddr4(2, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), "d0.10", netlink.MACVLAN_MODE_PRIVATE)

	// Another VLAN ID on the same base, this one carrying ipvlan, and a
	// VLAN on the MTU 9000 base, which it inherits.
	d.MustCreateNetwork(itest.Net{ID: c, Opts: map[string]string{"parent": "d1.4094", "type": "ipvlan", "ipvlan_mode": "l3", "mtu": "9000"}, V4: vmPool4(3)})
	vmWantVLAN(t, ns, "d1.4094", "d1", 4094)
	vmJoin(d, c, vmEp(3), vmAddr4(3, 10), "")
	vmWantIpvlan(t, ns, vmLink(vmEp(3)), "d1.4094", netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
	if mtu := ns.MustLink(vmLink(vmEp(3))).Attrs().MTU; mtu != 9000 {
		t.Fatalf("ipvlan on d1.4094 has MTU %d, want 9000", mtu)
	}
	ns.WantLinks(vmWith("d0.10", "d1.4094", vmLink(vmEp(1)), vmLink(vmEp(2)), vmLink(vmEp(3)))...)
	wantRecords(t, d, 3, a, b, c)

	d.RemoveEndpoint(a, vmEp(1))
	d.DeleteNetwork(a)
	if got := vmWantVLAN(t, ns, "d0.10", "d0", 10); got != idx {
		t.Fatalf("d0.10 re-created (index %d, was %d) while network %s still uses it", got, idx, b[:12])
	}
	// Deleting a network with its endpoint still there removes both.
	d.DeleteNetwork(b)
	d.DeleteNetwork(c)
	ns.WantLinks(vmBase...)
	if !strings.Contains(d.Log(), "deleted parent link underlay created") {
		t.Fatal("the deletion of the VLAN link was not logged")
	}
	wantRecords(t, d, 0)
}

// A VLAN link that existed before is used as it is and never deleted: not
// with the last network, not when a network on it is replaced, not after a
// kill -9 and restart.
func TestVMVLANParentPreexistingNeverDeleted(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.AddVLAN("d0.10", "d0", 10)
	idx := vmWantVLAN(t, ns, "d0.10", "d0", 10)
	a, b := vmNet(1), vmNet(2)
	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(1)})
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(2)})
	vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
	vmJoin(d, b, vmEp(2), vmAddr4(2, 10), "")
	if got := vmWantVLAN(t, ns, "d0.10", "d0", 10); got != idx {
		t.Fatalf("the existing d0.10 was replaced (index %d, was %d)", got, idx)
	}
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), "d0.10", netlink.MACVLAN_MODE_BRIDGE)

	d.Restart() // SIGKILL, then start again
	ns.WantLinks(vmWith("d0.10", vmLink(vmEp(1)), vmLink(vmEp(2)))...)

	// b comes back with another configuration: the stale copy is removed,
	// the VLAN link it used stays.
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d1"}, V4: vmPool4(2)})
	ns.WantLinks(vmWith("d0.10", vmLink(vmEp(1)))...)

	d.RemoveEndpoint(a, vmEp(1))
	d.DeleteNetwork(a)
	d.DeleteNetwork(b)
	if got := vmWantVLAN(t, ns, "d0.10", "d0", 10); got != idx {
		t.Fatalf("d0.10 changed (index %d, was %d)", got, idx)
	}
	ns.WantLinks(vmWith("d0.10")...)
	d.Restart()
	ns.WantLinks(vmWith("d0.10")...)
	wantRecords(t, d, 0)
}

// A VLAN or dummy parent underlay created that vanished while the daemon
// was down (a reboot) is created again before the socket serves; one that
// vanished while it runs is created again by the next Join or same-ID
// CreateNetwork that needs it.
func TestVMOwnedParentRecreated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   map[string]string
		parent string
	}{
		{"vlan", map[string]string{"parent": "d0.10"}, "d0.10"},
		{"dummy", nil, vmDummy(vmNet(1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, d := vmSetup(t, itest.DaemonOptions{})
			a, b := vmNet(1), vmNet(2)
			na := itest.Net{ID: a, Opts: tc.opts, V4: vmPool4(1)}
			d.MustCreateNetwork(na)
			wantParent := func() {
				t.Helper()
				// The live repair re-makes a vanished parent too, beside the
				// request: wait for it to be up (the repair sets it up
				// after making it) before the check.
				itest.WaitFor(5*time.Second, func() bool {
					l := ns.Link(tc.parent)
					return l != nil && l.Attrs().Flags&net.FlagUp != 0
				})
				if tc.name == "vlan" {
					vmWantVLAN(t, ns, tc.parent, "d0", 10)
				} else {
					vmWantDummy(t, ns, tc.parent)
				}
			}
			wantParent()
			if tc.name == "vlan" {
				d.MustCreateNetwork(itest.Net{ID: b, Opts: tc.opts, V4: vmPool4(2)})
			}
			vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")

			d.Kill()
			ns.Delete(tc.parent) // its endpoint link goes with it
			ns.WantLinks(vmBase...)
			d.Start()
			wantParent()
			ns.WantLinks(vmWith(tc.parent)...)
			if !strings.Contains(d.Log(), "re-creating missing parent link") {
				t.Fatal("the re-creation was not logged")
			}
			// The endpoint whose link vanished with it leaves cleanly, and a
			// new one joins on the new parent.
			d.RemoveEndpoint(a, vmEp(1))
			vmJoin(d, a, vmEp(2), vmAddr4(1, 11), "")
			vmWantMacvlan(t, ns, vmLink(vmEp(2)), tc.parent, netlink.MACVLAN_MODE_BRIDGE)

			// Vanished while running: Join creates it again.
			ns.Delete(tc.parent)
			vmJoin(d, a, vmEp(3), vmAddr4(1, 12), "")
			wantParent()
			vmWantMacvlan(t, ns, vmLink(vmEp(3)), tc.parent, netlink.MACVLAN_MODE_BRIDGE)
			// And so does a same-ID CreateNetwork (dockerd restarted).
			ns.Delete(tc.parent)
			d.MustCreateNetwork(na)
			wantParent()
			ns.WantLinks(vmWith(tc.parent)...)

			d.RemoveEndpoint(a, vmEp(2))
			d.RemoveEndpoint(a, vmEp(3))
			d.DeleteNetwork(a)
			if tc.name == "vlan" {
				wantParent() // b still uses it
				d.DeleteNetwork(b)
			}
			ns.WantLinks(vmBase...)
			wantRecords(t, d, 0)
		})
	}
}

// A VLAN parent may itself be the base of another VLAN parent
// (parent=d0.10.20: VLAN 20 inside VLAN 10, which underlay accepts). The
// inner VLAN link stands on the outer one, so the outer one is in use as
// long as a network uses the inner one: deleting the last network named
// on d0.10 must not delete d0.10 from under d0.10.20 (the kernel deletes
// a VLAN link's upper links with it).
func TestVMVLANBaseOfAnotherVLANKept(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	a, b := vmNet(1), vmNet(2)
	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(1)})
	vmWantVLAN(t, ns, "d0.10", "d0", 10)
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.10.20"}, V4: vmPool4(2)})
	vmWantVLAN(t, ns, "d0.10.20", "d0.10", 20)
	vmJoin(d, b, vmEp(2), vmAddr4(2, 10), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), "d0.10.20", netlink.MACVLAN_MODE_BRIDGE)

	d.DeleteNetwork(a)
	// Network b, its parent and its endpoint's link must be untouched.
	want := vmWith("d0.10", "d0.10.20", vmLink(vmEp(2)))
	sort.Strings(want)
	if got := ns.LinkNames(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deleting network %s (parent d0.10) while network %s uses d0.10.20: links %v, want %v", a[:12], b[:12], got, want)
	}
	// And b still takes containers.
	if msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: b, EndpointID: vmEp(3),
		Interface: &network.EndpointInterface{Address: vmAddr4(2, 11)}}, nil); msg != "" {
		t.Fatalf("CreateEndpoint on %s: %s", b[:12], msg)
	}
	if msg := d.Call("Join", network.JoinRequest{NetworkID: b, EndpointID: vmEp(3)}, nil); msg != "" {
		t.Errorf("Join on network %s after network %s was deleted: %s", b[:12], a[:12], msg)
	}

	d.RemoveEndpoint(b, vmEp(3))
	d.RemoveEndpoint(b, vmEp(2))
	d.DeleteNetwork(b)
	ns.WantLinks(vmBase...)
	wantRecords(t, d, 0)
}
