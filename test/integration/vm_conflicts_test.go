//go:build vm

package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vmWantRefusal fails unless msg is underlay's conflict refusal naming the
// holder by its 12-character ID, the parent and the reason.
func vmWantRefusal(t *testing.T, msg, holder, parent, reason string) {
	t.Helper()
	for _, want := range []string{"parent " + parent, "network " + holder[:12], reason, "docker network rm " + holder[:12]} {
		if !strings.Contains(msg, want) {
			t.Fatalf("conflicting create answered %q, want a refusal mentioning %q", msg, want)
		}
	}
}

// A parent carries macvlan or ipvlan links, never both (the kernel answers
// EBUSY, but only when the second kind's first link is added, at a
// container's start). underlay refuses the second network at
// CreateNetwork, naming the holder, whether or not the holder has links in
// the kernel yet.
func TestVMMacvlanAndIpvlanNeverShareAParent(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	ns.AddDummy("d2", 1500)
	ns.AddDummy("d3", 1500)
	iv, mv, ivEmpty, mvEmpty := vmNet(1), vmNet(2), vmNet(3), vmNet(4)
	d.MustCreateNetwork(itest.Net{ID: iv, Opts: map[string]string{"parent": "d0", "type": "ipvlan"}, V4: vmPool4(1)})
	vmJoin(d, iv, vmEp(1), vmAddr4(1, 10), "")
	d.MustCreateNetwork(itest.Net{ID: mv, Opts: map[string]string{"parent": "d1"}, V4: vmPool4(2)})
	vmJoin(d, mv, vmEp(2), vmAddr4(2, 10), "")
	d.MustCreateNetwork(itest.Net{ID: ivEmpty, Opts: map[string]string{"parent": "d2", "type": "ipvlan", "ipvlan_mode": "l3"}, V4: vmPool4(3)})
	d.MustCreateNetwork(itest.Net{ID: mvEmpty, Opts: map[string]string{"parent": "d3", "macvlan_mode": "vepa"}, V4: vmPool4(4)})
	links := append(vmWith("d2", "d3"), vmLink(vmEp(1)), vmLink(vmEp(2)))
	ns.WantLinks(links...)

	// The kernel fact the rule stands on.
	err := ns.NL.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "probe0", ParentIndex: ns.MustLink("d0").Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE})
	if !errors.Is(err, unix.EBUSY) {
		if err == nil {
			ns.Delete("probe0")
		}
		t.Fatalf("macvlan on a parent with ipvlan links: kernel answered %v, want EBUSY", err)
	}

	for i, tc := range []struct {
		holder, parent string
		opts           map[string]string
	}{
		{iv, "d0", map[string]string{"parent": "d0"}},
		{iv, "d0", map[string]string{"parent": "d0", "macvlan_mode": "passthru"}},
		{mv, "d1", map[string]string{"parent": "d1", "type": "ipvlan"}},
		{mv, "d1", map[string]string{"parent": "d1", "ipvlan_mode": "l3s", "ipvlan_flag": "private"}},
		{ivEmpty, "d2", map[string]string{"parent": "d2", "type": "macvlan"}},
		{mvEmpty, "d3", map[string]string{"parent": "d3", "type": "ipvlan", "ipvlan_mode": "l3"}},
	} {
		msg := d.CreateNetwork(itest.Net{ID: vmNet(10 + i), Opts: tc.opts, V4: vmPool4(10 + i)})
		vmWantRefusal(t, msg, tc.holder, tc.parent, "never both")
		if !strings.Contains(msg, "EBUSY") {
			t.Fatalf("refusal %q does not explain the kernel's EBUSY", msg)
		}
	}
	ns.WantLinks(links...)
	vmWantIpvlan(t, ns, vmLink(vmEp(1)), "d0", netlink.IPVLAN_MODE_L2, netlink.IPVLAN_FLAG_BRIDGE)
	wantRecords(t, d, 2, iv, mv, ivEmpty, mvEmpty)
	for _, n := range []string{iv, mv, ivEmpty, mvEmpty} {
		d.DeleteNetwork(n)
	}
	ns.WantLinks(vmWith("d2", "d3")...)
}

// All ipvlan links on one parent share one mode and flag, and the kernel
// silently applies the newest link's to all of them. A network with
// another ipvlan_mode or ipvlan_flag is refused before any link is made,
// so the holder's links keep theirs; the same mode and flag with a
// disjoint subnet is accepted, and both networks' containers talk.
func TestVMIpvlanModeSharedOnParent(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	a, b := vmNet(1), vmNet(2)
	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0", "ipvlan_mode": "l3"}, V4: vmPool4(1), V6: vmPool6(1)})
	ja := vmJoin(d, a, vmEp(1), vmAddr4(1, 10), vmAddr6(1, 10))

	for i, tc := range []struct {
		opts   map[string]string
		reason string
	}{
		{map[string]string{"parent": "d0", "ipvlan_mode": "l2"}, "ipvlan_mode=l3, not l2"},
		{map[string]string{"parent": "d0", "ipvlan_mode": "l3s"}, "ipvlan_mode=l3, not l3s"},
		{map[string]string{"parent": "d0", "type": "ipvlan"}, "ipvlan_mode=l3, not l2"}, // l2 is the default
		{map[string]string{"parent": "d0", "ipvlan_mode": "l3", "ipvlan_flag": "private"}, "ipvlan_flag=bridge, not private"},
	} {
		msg := d.CreateNetwork(itest.Net{ID: vmNet(10 + i), Opts: tc.opts, V4: vmPool4(10 + i)})
		vmWantRefusal(t, msg, a, "d0", tc.reason)
	}
	// Same mode, overlapping subnet: refused too.
	msg := d.CreateNetwork(itest.Net{ID: vmNet(20), Opts: map[string]string{"parent": "d0", "ipvlan_mode": "l3"}, V4: []string{"198.18.1.128/25"}})
	vmWantRefusal(t, msg, a, "d0", "overlaps")
	// Had the kernel been asked, the holder's link would now be in another mode.
	vmWantIpvlan(t, ns, vmLink(vmEp(1)), "d0", netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
	ns.WantLinks(vmWith(vmLink(vmEp(1)))...)

	// Same mode and flag, disjoint subnets: accepted.
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0", "type": "ipvlan", "ipvlan_mode": "l3", "ipvlan_flag": "bridge"}, V4: vmPool4(2), V6: vmPool6(2)})
	jb := vmJoin(d, b, vmEp(2), vmAddr4(2, 10), vmAddr6(2, 10))
	vmWantIpvlan(t, ns, vmLink(vmEp(1)), "d0", netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
	vmWantIpvlan(t, ns, vmLink(vmEp(2)), "d0", netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
	// l3 routes between the two subnets on the parent: with the connected
	// default routes of the Join answers, the containers reach each other.
	sa, sb := itest.NewNetns(t), itest.NewNetns(t)
	ethA := itest.JoinSandbox(ns, sa, ja, vmAddr4(1, 10), vmAddr6(1, 10))
	ethB := itest.JoinSandbox(ns, sb, jb, vmAddr4(2, 10), vmAddr6(2, 10))
	for _, c := range []struct {
		from, to *itest.Netns
		src, dst string
	}{
		{sa, sb, vmAddr4(1, 10), vmAddr4(2, 10)}, {sb, sa, vmAddr4(2, 10), vmAddr4(1, 10)},
		{sa, sb, vmAddr6(1, 10), vmAddr6(2, 10)}, {sb, sa, vmAddr6(2, 10), vmAddr6(1, 10)},
	} {
		if err := itest.UDPReach(c.from, vmIP(c.src), c.to, vmIP(c.dst), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	itest.LeaveSandbox(ns, sa, ethA, vmLink(vmEp(1)))
	itest.LeaveSandbox(ns, sb, ethB, vmLink(vmEp(2)))
	wantRecords(t, d, 2, a, b)
	d.RemoveEndpoint(a, vmEp(1))
	d.RemoveEndpoint(b, vmEp(2))
	d.DeleteNetwork(a)
	d.DeleteNetwork(b)
	ns.WantLinks(vmBase...)
}
