//go:build vm

package integration

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// DHCP on an ipvlan network (ipvlan l2, which needs the ipvlan module: the
// VM's kernel), through the real binary, on the test LAN of dhcp_test.go
// with its in-process server (the VM has no dnsmasq). ipvlan endpoints
// share the parent's MAC: each asks with a client ID of its own (option
// 61, type 0, "underlay-" + the endpoint ID), and the server tells them
// apart by it. Two endpoints lease distinct addresses, CreateEndpoint
// answers the address and no MAC, Join answers the router; containers
// set up from the answers reach the router and each other; both leases
// are renewed at T1 with the links in the containers; DeleteEndpoint
// releases one (the server frees it) and leaves the other's.
func TestVMDHCPIpvlan(t *testing.T) {
	// Serial: the renewals must come on schedule.
	start := time.Now()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	lan := itest.NewLAN(t, ns, "lan0", dhcpServer)
	e := &dhcpEnv{ns: ns, lan: lan, srv: lan.Serve(itest.DHCPConfig{LeaseTime: dhcpLease}), d: itest.StartDaemon(t, ns, itest.DaemonOptions{})}
	parentMAC := ns.MustLink("lan0").Attrs().HardwareAddr
	router := dhcpServer.Addr()
	n, e1, e2 := vmNet(1), vmEp(1), vmEp(2)
	e.createNetwork(t, n, "type=ipvlan")

	type ep struct {
		id    string
		addr  netip.Prefix
		lease itest.ServerLease
		j     network.JoinResponse
		sb    *itest.Netns
		eth   string
	}
	eps := []*ep{{id: e1}, {id: e2}}
	for _, x := range eps {
		var mac string
		x.addr, mac, x.lease = e.createEndpoint(t, n, x.id)
		if mac != "" {
			t.Fatalf("CreateEndpoint on ipvlan answered MAC %s: want none (ipvlan links share the parent's MAC)", mac)
		}
		if wantID := append([]byte{0}, "underlay-"+x.id...); !bytes.Equal(x.lease.MAC, parentMAC) || !bytes.Equal(x.lease.ClientID, wantID) {
			t.Fatalf("the server leased %s to MAC %s client ID %q: want the parent's MAC %s and client ID %q", x.addr, x.lease.MAC, x.lease.ClientID, parentMAC, wantID)
		}
	}
	if eps[0].addr.Addr() == eps[1].addr.Addr() {
		t.Fatalf("both ipvlan endpoints got %s", eps[0].addr)
	}
	for _, x := range eps {
		x.j = e.join(t, n, x.id)
		if x.j.Gateway != router.String() || len(x.j.StaticRoutes) != 0 {
			t.Fatalf("Join of %s answered %+v: want gateway %s (the lease's router) and no static route", x.id[:12], x.j, router)
		}
		vmWantIpvlan(t, ns, x.j.InterfaceName.SrcName, "lan0", netlink.IPVLAN_MODE_L2, netlink.IPVLAN_FLAG_BRIDGE)
		x.sb = itest.NewNetns(t)
		x.eth = itest.JoinSandbox(ns, x.sb, x.j, x.addr.String())
	}
	for _, c := range []struct {
		x   *ep
		dst netip.Addr
	}{{eps[0], router}, {eps[1], router}, {eps[0], eps[1].addr.Addr()}} {
		if err := itest.Ping(c.x.sb, c.x.addr.Addr().String(), c.dst.String(), 10*time.Second); err != nil {
			t.Fatalf("ipvlan endpoint on the LAN with its leased address: %v", err)
		}
	}

	// Renewal at T1, with the links in the containers, by client ID.
	for _, x := range eps {
		prev := x.lease
		x.lease = waitRenewed(t, e.srv, x.addr.Addr(), prev, time.Until(prev.Granted.Add(dhcpT1+dhcpSlack)))
		wantRenewalAt(t, e.srv, itest.From(parentMAC, prev.ClientID), x.addr.Addr(), prev.Granted, prev.Granted.Add(dhcpT1), "ipvlan endpoint "+x.id[:12])
	}

	// Release of one: the server frees its address and keeps the other's.
	itest.LeaveSandbox(ns, eps[0].sb, eps[0].eth, eps[0].j.InterfaceName.SrcName)
	e.d.RemoveEndpoint(n, e1)
	if !itest.WaitFor(15*time.Second, func() bool { _, held := e.srv.Lease(eps[0].addr.Addr()); return !held }) {
		t.Fatalf("DeleteEndpoint of %s: the server still holds %s:\n%s", e1[:12], eps[0].addr, e.srv.MessagesString())
	}
	rel := e.srv.Messages(func(m itest.DHCPMessage) bool {
		return itest.From(parentMAC, eps[0].lease.ClientID)(m) && m.Type == dhcpv4.MessageTypeRelease
	})
	if len(rel) != 1 || rel[0].ClientIP != eps[0].addr.Addr() {
		t.Fatalf("RELEASEs of %s's client ID: %v: want one, from %s", e1[:12], rel, eps[0].addr.Addr())
	}
	if l, held := e.srv.Lease(eps[1].addr.Addr()); !held || !bytes.Equal(l.ClientID, eps[1].lease.ClientID) {
		t.Fatalf("releasing %s's lease freed the other endpoint's %s too:\n%s", e1[:12], eps[1].addr, e.srv.LeasesString())
	}
	itest.LeaveSandbox(ns, eps[1].sb, eps[1].eth, eps[1].j.InterfaceName.SrcName)
	e.d.RemoveEndpoint(n, e2)
	if !itest.WaitFor(15*time.Second, func() bool { return len(e.srv.Leases()) == 0 }) {
		t.Fatalf("after both DeleteEndpoints the server holds:\n%s", e.srv.LeasesString())
	}
	e.d.DeleteNetwork(n)
	ns.WantLinks("lo", "lan0")
	t.Logf("took %s", time.Since(start).Round(100*time.Millisecond))
}
