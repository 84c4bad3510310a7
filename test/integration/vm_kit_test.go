//go:build vm

package integration

import (
	"fmt"
	"net"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// The VM suite: ipvlan, 802.1Q VLAN and dummy parents, which need kernel
// modules the host may lack. It runs in the project's test VM
// (`make test-vm`, test/vm/run.sh) together with the host suite.

// vmSetup returns a namespace with up dummy parents d0 (MTU 1500) and d1
// (MTU 9000) and an underlay serving in it. Outside the VM it skips when
// the kernel lacks dummy, 8021q or ipvlan (and fails in CI).
func vmSetup(t *testing.T, o itest.DaemonOptions) (*itest.Netns, *itest.Daemon) {
	t.Helper()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	ns.AddDummy("d0", 1500)
	ns.AddDummy("d1", 9000)
	return ns, itest.StartDaemon(t, ns, o)
}

// vmBase are the links vmSetup makes.
var vmBase = []string{"lo", "d0", "d1"}

func vmWith(names ...string) []string { return append(append([]string{}, vmBase...), names...) }

// vmNet and vmEp are Docker-like IDs whose first 12 characters differ per
// i; vmLink and vmDummy are the names underlay gives their links.
func vmNet(i int) string      { return fmt.Sprintf("%012x%052d", 0xa00000000000+i, i) }
func vmEp(i int) string       { return fmt.Sprintf("%012x%052d", 0xe00000000000+i, i) }
func vmLink(ep string) string { return "ule" + ep[:12] }
func vmDummy(n string) string { return "uli" + n[:12] }

// vmPool4/vmPool6 are the pools of subnet x: "198.18.x.0/24,198.18.x.1/24"
// and "2001:db8:x::/64,2001:db8:x::1/64"; vmAddr4/vmAddr6 the addresses .h
// and ::h in them, vmIP the address of a CIDR.
func vmPool4(x int) []string { return []string{fmt.Sprintf("198.18.%d.0/24,198.18.%d.1/24", x, x)} }
func vmPool6(x int) []string {
	return []string{fmt.Sprintf("2001:db8:%x::/64,2001:db8:%x::1/64", x, x)}
}
func vmAddr4(x, h int) string { return fmt.Sprintf("198.18.%d.%d/24", x, h) }
func vmAddr6(x, h int) string { return fmt.Sprintf("2001:db8:%x::%x/64", x, h) }
func vmIP(cidr string) string { a, _, _ := net.ParseCIDR(cidr); return a.String() }

// vmWantVLAN fails unless name is an up 802.1Q link with the ID on base; it
// returns its index.
func vmWantVLAN(t *testing.T, ns *itest.Netns, name, base string, id int) int {
	t.Helper()
	l := ns.MustLink(name)
	v, ok := l.(*netlink.Vlan)
	if !ok || v.VlanId != id || ns.ParentName(l) != base || l.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("link %s: %T (%s) VLAN %v on %s flags %v: want an up VLAN %d on %s", name, l, l.Type(), vmVLANID(l), ns.ParentName(l), l.Attrs().Flags, id, base)
	}
	return l.Attrs().Index
}

func vmVLANID(l netlink.Link) any {
	if v, ok := l.(*netlink.Vlan); ok {
		return v.VlanId
	}
	return nil
}

// vmWantDummy fails unless name is an up dummy link; it returns its index.
func vmWantDummy(t *testing.T, ns *itest.Netns, name string) int {
	t.Helper()
	l := ns.MustLink(name)
	if _, ok := l.(*netlink.Dummy); !ok || l.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("link %s: %T (%s) flags %v: want an up dummy link", name, l, l.Type(), l.Attrs().Flags)
	}
	return l.Attrs().Index
}

// vmWantMacvlan fails unless name is a macvlan link in mode on parent.
func vmWantMacvlan(t *testing.T, ns *itest.Netns, name, parent string, mode netlink.MacvlanMode) {
	t.Helper()
	l := ns.MustLink(name)
	if mv, ok := l.(*netlink.Macvlan); !ok || mv.Mode != mode || ns.ParentName(l) != parent {
		t.Fatalf("link %s: %T (%s) mode %v on %s: want macvlan mode %v on %s", name, l, l.Type(), modeOf(l), ns.ParentName(l), mode, parent)
	}
}

// vmWantIpvlan fails unless name is an ipvlan link with mode and flag on
// parent, sharing the parent's MAC.
func vmWantIpvlan(t *testing.T, ns *itest.Netns, name, parent string, mode netlink.IPVlanMode, flag netlink.IPVlanFlag) {
	t.Helper()
	l := ns.MustLink(name)
	iv, ok := l.(*netlink.IPVlan)
	if !ok || iv.Mode != mode || iv.Flag != flag || ns.ParentName(l) != parent {
		t.Fatalf("link %s: %T (%s) %+v on %s: want ipvlan mode %v flag %v on %s", name, l, l.Type(), l, ns.ParentName(l), mode, flag, parent)
	}
	if pm := ns.MustLink(parent).Attrs().HardwareAddr.String(); l.Attrs().HardwareAddr.String() != pm {
		t.Fatalf("ipvlan link %s has MAC %s, want its parent's %s", name, l.Attrs().HardwareAddr, pm)
	}
}

// vmJoin creates and joins an endpoint and returns the Join answer.
func vmJoin(d *itest.Daemon, net, ep, addr, addr6 string) network.JoinResponse {
	_, j := d.Endpoint(net, ep, addr, addr6, "")
	return j
}
