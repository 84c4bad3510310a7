package integration

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/vishvananda/netlink"
)

// netlinkutil's Block on the real kernel: a macvlan "container" on vp0
// reaches a LAN host on vp0's peer until its address is blocked on vp0's
// egress (IPv4 source and ARP sender dropped; IPv6 source dropped), and
// again once unblocked; the table is gone with its last rule, and another
// address is not blocked meanwhile.
func TestLostAddressBlockedOnTheParent(t *testing.T) {
	t.Parallel()
	for _, f := range []struct {
		name                 string
		lanHost, lost, other string
		prefix               string
	}{
		{"ipv4", "198.18.5.1", "198.18.5.10", "198.18.5.11", "/24"},
		{"ipv6", "2001:db8:5::1", "2001:db8:5::10", "2001:db8:5::11", "/64"},
	} {
		t.Run(f.name, func(t *testing.T) { testLostAddressBlocked(t, f.lanHost, f.lost, f.other, f.prefix) })
	}
}

func testLostAddressBlocked(t *testing.T, lanHost, lostAddr, otherAddr, prefix string) {
	host := itest.NewNetns(t)
	host.AddVeth("vp0", "vp0-peer", 1500)
	lan := itest.NewNetns(t)
	host.MoveLink("vp0-peer", lan, "lan0")
	lan.Up("lan0")
	lan.AddAddr("lan0", lanHost+prefix)
	ctr := itest.NewNetns(t)
	ctr2 := itest.NewNetns(t)
	for i, c := range []*itest.Netns{ctr, ctr2} {
		name := []string{"mv0", "mv1"}[i]
		if err := host.NL.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: host.MustLink("vp0").Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
			t.Fatal(err)
		}
		host.MoveLink(name, c, "eth0")
		c.Up("eth0")
		c.AddAddr("eth0", []string{lostAddr, otherAddr}[i]+prefix)
	}
	k := netlinkutil.NewAt(host.Handle())
	ctx := context.Background()
	lost := netip.MustParseAddr(lostAddr)
	if err := itest.Ping(ctr, lostAddr, lanHost, 5*time.Second); err != nil {
		t.Fatalf("before the block: %v", err)
	}
	if err := k.Block(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if err := k.Block(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatalf("blocking twice: %v", err)
	}
	if b, err := k.BlockedAddrs(ctx, "underlay:test"); err != nil || len(b) != 1 || b[0] != (netlinkutil.Blocked{Parent: "vp0", Addr: lost, Tag: "underlay:test"}) {
		t.Fatalf("blocked %v, %v", b, err)
	}
	// The LAN host forgets the container's MAC, so ARP has to pass too.
	_ = lan.NL.NeighDel(&netlink.Neigh{LinkIndex: lan.MustLink("lan0").Attrs().Index, IP: lost.AsSlice()})
	if err := itest.Ping(ctr, lostAddr, lanHost, 2*time.Second); err == nil {
		t.Fatal("the container reached the LAN from a blocked address")
	}
	if err := itest.Ping(ctr2, otherAddr, lanHost, 5*time.Second); err != nil {
		t.Fatalf("another address was blocked too: %v", err)
	}
	if err := k.Unblock(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 5*time.Second); err != nil {
		t.Fatalf("after the unblock: %v", err)
	}
	if b, err := k.BlockedAddrs(ctx, "underlay:test"); err != nil || len(b) != 0 {
		t.Fatalf("blocked after unblock: %v, %v", b, err)
	}
	if err := k.Unblock(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatalf("unblocking what is not blocked: %v", err)
	}
	// Another instance's block is its own: this one's Unblock leaves it.
	if err := k.Block(ctx, "vp0", lost, "underlay:other"); err != nil {
		t.Fatal(err)
	}
	if err := k.Block(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if err := k.Unblock(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if b, err := k.BlockedAddrs(ctx, "underlay:other"); err != nil || len(b) != 1 {
		t.Fatalf("the other instance's block after this one's unblock: %v, %v", b, err)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 2*time.Second); err == nil {
		t.Fatal("the other instance's block no longer drops the address")
	}
	if err := k.Unblock(ctx, "vp0", lost, "underlay:other"); err != nil {
		t.Fatal(err)
	}
	// A parent renamed while blocked (an owned VLAN followed to its new
	// name): unblocking under the new name finds the block.
	if err := k.Block(ctx, "vp0", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if err := host.NL.LinkSetDown(host.MustLink("vp0")); err != nil {
		t.Fatal(err)
	}
	if err := host.NL.LinkSetName(host.MustLink("vp0"), "vp0x"); err != nil {
		t.Fatal(err)
	}
	host.Up("vp0x")
	if err := k.Unblock(ctx, "vp0x", lost, "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if b, err := k.BlockedAddrs(ctx, "underlay:test"); err != nil || len(b) != 0 {
		t.Fatalf("blocked after the unblock under the parent's new name: %v, %v", b, err)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 10*time.Second); err != nil {
		t.Fatalf("after the unblock under the new name: %v", err)
	}
}
