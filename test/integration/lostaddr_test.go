package integration

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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

// A parent renamed while an address is blocked on it (an owned VLAN an
// operator renamed, which underlay follows): since Linux 6.16 a netdev
// chain's hook is bound to the device's name, so the block no longer drops
// the renamed parent's frames, and a new link that takes the old name
// would have its frames dropped. After MoveBlocks, on every kernel: the
// address is blocked under the new name (frames dropped, chain
// lost-<new>), the old name's chain is gone, a new link with the old name
// passes the address, and Unblock under the new name lets it through
// again. What the kernel did before the move is only logged.
func TestLostAddressBlockMovesWithTheRenamedParent(t *testing.T) {
	t.Parallel()
	for _, f := range []struct {
		name               string
		lanHost, lost, pfx string
	}{
		{"ipv4", "198.18.6.1", "198.18.6.10", "/24"},
		{"ipv6", "2001:db8:6::1", "2001:db8:6::10", "/64"},
	} {
		t.Run(f.name, func(t *testing.T) { testBlockMovesWithRename(t, f.lanHost, f.lost, f.pfx) })
	}
}

// lostChains names the chains of tag's lost-address table in ns.
func lostChains(t *testing.T, ns *itest.Netns, tag string) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Fatalf("list nftables chains: %v", err)
	}
	var out []string
	for _, ch := range all {
		if ch.Table != nil && ch.Table.Name == "underlay-"+strings.TrimPrefix(tag, "underlay:") {
			out = append(out, ch.Name)
		}
	}
	slices.Sort(out)
	return out
}

// lanWithContainer gives parent a LAN host (lanHost on its peer, in a
// namespace of its own) and a macvlan "container" on it with addr.
func lanWithContainer(t *testing.T, host *itest.Netns, parent, peer, lanHost, addr, pfx string) *itest.Netns {
	t.Helper()
	host.AddVeth(parent, peer, 1500)
	lan := itest.NewNetns(t)
	host.MoveLink(peer, lan, "lan0")
	lan.Up("lan0")
	lan.AddAddr("lan0", lanHost+pfx)
	ctr := itest.NewNetns(t)
	mv := "mv-" + peer
	if err := host.NL.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: mv, ParentIndex: host.MustLink(parent).Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatal(err)
	}
	host.MoveLink(mv, ctr, "eth0")
	ctr.Up("eth0")
	ctr.AddAddr("eth0", addr+pfx)
	return ctr
}

func testBlockMovesWithRename(t *testing.T, lanHost, lostAddr, pfx string) {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	t.Logf("kernel %s", unix.ByteSliceToString(uts.Release[:]))
	const tag = "underlay:test"
	host := itest.NewNetns(t)
	ctr := lanWithContainer(t, host, "vp0", "vp0-peer", lanHost, lostAddr, pfx)
	k := netlinkutil.NewAt(host.Handle())
	ctx := context.Background()
	lost := netip.MustParseAddr(lostAddr)
	if err := itest.Ping(ctr, lostAddr, lanHost, 5*time.Second); err != nil {
		t.Fatalf("before the block: %v", err)
	}
	if err := k.Block(ctx, "vp0", lost, tag); err != nil {
		t.Fatal(err)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 2*time.Second); err == nil {
		t.Fatal("the container reached the LAN from a blocked address")
	}
	// The operator's rename: down, renamed, up.
	if err := host.NL.LinkSetDown(host.MustLink("vp0")); err != nil {
		t.Fatal(err)
	}
	if err := host.NL.LinkSetName(host.MustLink("vp0"), "vp0x"); err != nil {
		t.Fatal(err)
	}
	host.Up("vp0x")
	unmoved := itest.Ping(ctr, lostAddr, lanHost, 3*time.Second) != nil
	// A new link takes the old name, with a container of the same address
	// on a LAN of its own.
	ctr2 := lanWithContainer(t, host, "vp0", "vp1-peer", lanHost, lostAddr, pfx)
	newDropped := itest.Ping(ctr2, lostAddr, lanHost, 3*time.Second) != nil
	t.Logf("before the move: the renamed parent's frames from %s dropped: %v; the new link named vp0's dropped: %v", lostAddr, unmoved, newDropped)

	moved, err := k.MoveBlocks(ctx, "vp0", "vp0x", tag)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || moved[0] != lost {
		t.Fatalf("moved %v, want [%s]", moved, lost)
	}
	if got := lostChains(t, host, tag); !slices.Equal(got, []string{"lost-vp0x"}) {
		t.Fatalf("chains after the move: %v, want [lost-vp0x]", got)
	}
	if b, err := k.BlockedAddrs(ctx, tag); err != nil || len(b) != 1 || b[0] != (netlinkutil.Blocked{Parent: "vp0x", Addr: lost, Tag: tag}) {
		t.Fatalf("blocked after the move: %v, %v", b, err)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 2*time.Second); err == nil {
		t.Fatal("after the move, the container reached the LAN from the blocked address through the renamed parent")
	}
	if err := itest.Ping(ctr2, lostAddr, lanHost, 5*time.Second); err != nil {
		t.Fatalf("after the move, the new link with the old name drops the address: %v", err)
	}
	// Moving again (nothing left on vp0) is not an error and moves nothing.
	if moved, err := k.MoveBlocks(ctx, "vp0", "vp0x", tag); err != nil || len(moved) != 0 {
		t.Fatalf("second move: %v, %v", moved, err)
	}
	if err := k.Unblock(ctx, "vp0x", lost, tag); err != nil {
		t.Fatal(err)
	}
	if got := lostChains(t, host, tag); len(got) != 0 {
		t.Fatalf("chains after the unblock: %v", got)
	}
	if err := itest.Ping(ctr, lostAddr, lanHost, 10*time.Second); err != nil {
		t.Fatalf("after the unblock under the new name: %v", err)
	}
}
