//go:build vm

package integration

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"golang.org/x/sys/unix"
)

// An owned VLAN (underlay made lan0.10 for -o parent=lan0.10) that an
// operator renames while a lease on it is lost, through the real binary
// on an 802.1Q LAN with its DHCP server on VLAN 10: the daemon follows the
// rename and the address stays blocked under the new name (the chain
// lost-<new name>, the old name's gone, the container's frames from it
// dropped); when the server gives the lease back it is won back and the
// block goes. Issue 33: since Linux 6.16 a netdev chain is bound to its
// device's name (TestLostAddressBlockMovesWithTheRenamedParent), so a
// block left under the old name would stop dropping.
func TestVMOwnedVLANRenamedWhileLeaseLost(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	lan := itest.NewVLANLAN(t, ns, "lan0", 10, dhcpServer)
	e := &dhcpEnv{ns: ns, lan: lan, srv: lan.Serve(itest.DHCPConfig{LeaseTime: dhcpLease}), d: itest.StartDaemon(t, ns, itest.DaemonOptions{})}
	n, ep := vmNet(1), vmEp(1)
	e.d.MustCall("CreateNetwork", itest.DHCPNetwork(n, lan.Parent, "dhcp_timeout=10s"), nil)
	idx := vmWantVLAN(t, ns, "lan0.10", "lan0", 10)
	addr, _, lease := e.createEndpoint(t, n, ep)
	j := e.join(t, n, ep)
	sb := itest.NewNetns(t)
	eth := itest.JoinSandbox(ns, sb, j, addr.String())
	src, srv := addr.Addr().String(), dhcpServer.Addr().String()
	if err := itest.Ping(sb, src, srv, 10*time.Second); err != nil {
		t.Fatalf("before the lease is lost: %v", err)
	}
	k := netlinkutil.NewAt(ns.Handle())
	mark := instanceMark(t, e.d)
	blockedOn := func(parent string) func() bool {
		return func() bool {
			b, err := k.BlockedAddrs(context.Background(), mark)
			return err == nil && len(b) == 1 && b[0].Addr == addr.Addr() && b[0].Parent == parent &&
				slices.Equal(lostChains(t, ns, mark), []string{"lost-" + parent})
		}
	}

	// Lost: the server refuses the renewal at T1 (and every later ask).
	e.srv.Set(func(c *itest.DHCPConfig) { c.NAKAll = true })
	if !itest.WaitFor(time.Until(lease.Granted.Add(dhcpT1+dhcpSlack+5*time.Second)), blockedOn("lan0.10")) {
		t.Fatalf("the refused lease's address is not blocked on lan0.10 after T1:\n%s", tailLog(e.d.Log(), 20))
	}
	if err := itest.Ping(sb, src, srv, 2*time.Second); err == nil {
		t.Fatal("the container reaches the LAN from the address it lost")
	}

	// The operator renames the VLAN (the VM's 6.1 kernel renames only a
	// down link; the watcher may set it up again in between: retried).
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := ns.MustLink("lan0.10")
		err := ns.NL.LinkSetDown(l)
		if err == nil {
			err = ns.NL.LinkSetName(l, "lanmine")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("rename lan0.10 to lanmine: %v", err)
		}
	}
	if !e.d.WaitLog(15*time.Second, "its record and networks follow it") {
		t.Fatalf("the record did not follow the renamed VLAN:\n%s", tailLog(e.d.Log(), 20))
	}
	if !itest.WaitFor(10*time.Second, func() bool {
		l := ns.Link("lanmine")
		return l != nil && l.Attrs().Flags&net.FlagUp != 0
	}) {
		t.Fatalf("lanmine is not up again after the rename:\n%s", tailLog(e.d.Log(), 20))
	}
	if got := vmWantVLAN(t, ns, "lanmine", "lan0", 10); got != idx {
		t.Fatalf("the renamed VLAN is index %d, was %d: re-made", got, idx)
	}
	if !itest.WaitFor(10*time.Second, blockedOn("lanmine")) {
		b, err := k.BlockedAddrs(context.Background(), mark)
		t.Fatalf("after the follow, blocked %v (%v), chains %v: want %s on lanmine only, in chain lost-lanmine:\n%s",
			b, err, lostChains(t, ns, mark), addr.Addr(), tailLog(e.d.Log(), 20))
	}
	if !e.d.WaitLog(5*time.Second, "their blocks moved to its new name") {
		t.Errorf("the move of the block was not logged:\n%s", tailLog(e.d.Log(), 20))
	}
	if err := itest.Ping(sb, src, srv, 2*time.Second); err == nil {
		t.Fatal("after the rename the container reaches the LAN from the address it lost")
	}

	// The server gives it back: won back at the next ask (every 30 s),
	// the block gone from under the new name. Two asks are awaited: in the
	// emulated VM beside other suites one ask's time (dhcp_timeout, 3 s
	// then) passed before the server's answer was in (CI's run of c267b21:
	// the DISCOVER went out 1.6 s into it and no OFFER came in the 1.3 s
	// left).
	e.srv.Set(func(c *itest.DHCPConfig) { c.NAKAll = false })
	if !itest.WaitFor(2*30*time.Second+20*time.Second, func() bool {
		b, err := k.BlockedAddrs(context.Background(), mark)
		return err == nil && len(b) == 0 && len(lostChains(t, ns, mark)) == 0
	}) {
		t.Fatalf("the block stays after the server gives the address back: chains %v:\n%s", lostChains(t, ns, mark), tailLog(e.d.Log(), 20))
	}
	if !e.d.WaitLog(5*time.Second, "won a lost DHCP lease back") {
		t.Errorf("no win-back line:\n%s", tailLog(e.d.Log(), 20))
	}
	if err := itest.Ping(sb, src, srv, 10*time.Second); err != nil {
		t.Fatalf("after the win back: %v", err)
	}
	if l, ok := e.srv.Lease(addr.Addr()); !ok || l.MAC.String() != lease.MAC.String() {
		t.Fatalf("the server's lease of %s: %+v, want it held by %s again", addr, l, lease.MAC)
	}

	itest.LeaveSandbox(ns, sb, eth, j.InterfaceName.SrcName)
	e.d.RemoveEndpoint(n, ep)
	e.d.DeleteNetwork(n)
	ns.WantLinks("lo", "lan0")
}
