//go:build vm

package integration

import (
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Networks without a parent get a dummy link of their own, named uli + 12
// characters of the network ID: one per network, reused when the same ID
// comes back, removed with the network. Their endpoints get no gateway.
func TestVMInternalNetworksGetOwnDummy(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	a, b, c := vmNet(1), vmNet(2), vmNet(3)
	na := itest.Net{ID: a, Internal: true, V4: vmPool4(1), V6: vmPool6(1)}
	d.MustCreateNetwork(na)
	d.MustCreateNetwork(itest.Net{ID: b, V4: vmPool4(2)}) // no parent, not flagged internal
	d.MustCreateNetwork(itest.Net{ID: c, Internal: true, Opts: map[string]string{"type": "ipvlan", "ipvlan_mode": "l3", "mtu": "9000"}, V4: vmPool4(3)})
	idxA := vmWantDummy(t, ns, vmDummy(a))
	vmWantDummy(t, ns, vmDummy(b))
	vmWantDummy(t, ns, vmDummy(c))
	if mtu := ns.MustLink(vmDummy(c)).Attrs().MTU; mtu != 9000 {
		t.Fatalf("dummy parent of a network with mtu=9000 has MTU %d", mtu)
	}
	ns.WantLinks(vmWith(vmDummy(a), vmDummy(b), vmDummy(c))...)

	for i, n := range []string{a, b, c} {
		ep := vmEp(i + 1)
		j := vmJoin(d, n, ep, vmAddr4(i+1, 10), "")
		if j.Gateway != "" || j.GatewayIPv6 != "" || len(j.StaticRoutes) != 0 || j.InterfaceName.SrcName != vmLink(ep) {
			t.Fatalf("Join on internal network %s answered %+v: want no gateway and no routes", n[:12], j)
		}
	}
	vmWantMacvlan(t, ns, vmLink(vmEp(1)), vmDummy(a), netlink.MACVLAN_MODE_BRIDGE)
	vmWantMacvlan(t, ns, vmLink(vmEp(2)), vmDummy(b), netlink.MACVLAN_MODE_BRIDGE)
	vmWantIpvlan(t, ns, vmLink(vmEp(3)), vmDummy(c), netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
	if mtu := ns.MustLink(vmLink(vmEp(3))).Attrs().MTU; mtu != 9000 {
		t.Fatalf("endpoint of a network with mtu=9000 has MTU %d", mtu)
	}

	// The same ID again (dockerd restarted): still one dummy, the same one.
	for i := 0; i < 3; i++ {
		d.MustCreateNetwork(na)
	}
	if got := vmWantDummy(t, ns, vmDummy(a)); got != idxA {
		t.Fatalf("%s re-created (index %d, was %d) on a same-ID create", vmDummy(a), got, idxA)
	}
	all := []string{vmDummy(a), vmDummy(b), vmDummy(c), vmLink(vmEp(1)), vmLink(vmEp(2)), vmLink(vmEp(3))}
	ns.WantLinks(vmWith(all...)...)

	// Another network cannot take an internal network's dummy as parent.
	msg := d.CreateNetwork(itest.Net{ID: vmNet(4), Opts: map[string]string{"parent": vmDummy(a)}, V4: vmPool4(4)})
	if !strings.Contains(msg, vmDummy(a)) || !strings.Contains(msg, "internal network") {
		t.Fatalf("parent=%s for another network answered %q, want a refusal", vmDummy(a), msg)
	}
	ns.WantLinks(vmWith(all...)...)

	wantRecords(t, d, 3, a, b, c)
	d.RemoveEndpoint(a, vmEp(1))
	d.DeleteNetwork(a)
	ns.WantLinks(vmWith(vmDummy(b), vmDummy(c), vmLink(vmEp(2)), vmLink(vmEp(3)))...)
	d.MustCall("Leave", network.LeaveRequest{NetworkID: b, EndpointID: vmEp(2)}, nil)
	d.DeleteNetwork(b) // its endpoint record still there, as after a crashed container
	d.DeleteNetwork(c) // its endpoint still joined
	ns.WantLinks(vmBase...)
	wantRecords(t, d, 0)
}

// Swarm network IDs are not hexadecimal (25 characters of base 36): the
// dummy of such an internal network is named uli + 12 hex characters of a
// hash of the ID, still one per network, reused and removed like the rest.
func TestVMInternalNetworkWithSwarmID(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ids := []string{"x3nbgq8wzbl0r6yd1e5pk2ms7", "x3nbgq8wzbl0r6yd1e5pk2ms8"} // 12-character prefix shared
	var dummies []string
	for i, id := range ids {
		before := ns.LinkNames()
		n := itest.Net{ID: id, Internal: true, V4: vmPool4(i + 1)}
		d.MustCreateNetwork(n)
		d.MustCreateNetwork(n)
		added := vmNewLinks(before, ns.LinkNames())
		if len(added) != 1 || len(added[0]) != 15 || !strings.HasPrefix(added[0], "uli") || strings.Trim(added[0][3:], "0123456789abcdef") != "" {
			t.Fatalf("internal network %s added links %v, want one uli + 12 hex characters", id, added)
		}
		vmWantDummy(t, ns, added[0])
		vmJoin(d, id, vmEp(i+1), vmAddr4(i+1, 10), "")
		vmWantMacvlan(t, ns, vmLink(vmEp(i+1)), added[0], netlink.MACVLAN_MODE_BRIDGE)
		dummies = append(dummies, added[0])
	}
	ns.WantLinks(vmWith(dummies[0], dummies[1], vmLink(vmEp(1)), vmLink(vmEp(2)))...)
	for i, id := range ids {
		d.RemoveEndpoint(id, vmEp(i+1))
		d.DeleteNetwork(id)
	}
	ns.WantLinks(vmBase...)
}

// newLinks returns the names in after that are not in before.
func vmNewLinks(before, after []string) []string {
	seen := map[string]bool{}
	for _, n := range before {
		seen[n] = true
	}
	var out []string
	for _, n := range after {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out
}
