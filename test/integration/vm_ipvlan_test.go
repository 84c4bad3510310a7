//go:build vm

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

var (
	vmIpvlanModes = []struct {
		name string
		mode netlink.IPVlanMode
	}{{"l2", netlink.IPVLAN_MODE_L2}, {"l3", netlink.IPVLAN_MODE_L3}, {"l3s", netlink.IPVLAN_MODE_L3S}}
	vmIpvlanFlags = []struct {
		name string
		flag netlink.IPVlanFlag
	}{{"bridge", netlink.IPVLAN_FLAG_BRIDGE}, {"private", netlink.IPVLAN_FLAG_PRIVATE}, {"vepa", netlink.IPVLAN_FLAG_VEPA}}
)

// Every ipvlan mode with every flag on a dummy parent, dual stack: the
// links are what was asked for, Join answers what libnetwork needs for the
// mode, and two containers configured from those answers reach each other
// through the parent exactly when the flag allows it (bridge: yes;
// private: no; vepa: only through the wire, and a dummy parent has none).
func TestVMIpvlanModesAndFlags(t *testing.T) {
	t.Parallel()
	for _, m := range vmIpvlanModes {
		for _, f := range vmIpvlanFlags {
			m, f := m, f
			t.Run(m.name+"/"+f.name, func(t *testing.T) {
				ns, d := vmSetup(t, itest.DaemonOptions{})
				n, e1, e2 := vmNet(1), vmEp(1), vmEp(2)
				// type is left out: ipvlan_mode implies it.
				d.MustCreateNetwork(itest.Net{ID: n, Opts: map[string]string{"parent": "d0", "ipvlan_mode": m.name, "ipvlan_flag": f.name}, V4: vmPool4(1), V6: vmPool6(1)})
				var ce network.CreateEndpointResponse
				d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: n, EndpointID: e1,
					Interface: &network.EndpointInterface{Address: vmAddr4(1, 10), AddressIPv6: vmAddr6(1, 10)}}, &ce)
				if ce.Interface != nil && (ce.Interface.MacAddress != "" || ce.Interface.Address != "" || ce.Interface.AddressIPv6 != "") {
					t.Fatalf("CreateEndpoint on ipvlan answered %+v: want nothing (ipvlan links share the parent's MAC)", ce.Interface)
				}
				var j1 network.JoinResponse
				d.MustCall("Join", network.JoinRequest{NetworkID: n, EndpointID: e1, SandboxKey: "/var/run/docker/netns/c1"}, &j1)
				j2 := vmJoin(d, n, e2, vmAddr4(1, 11), vmAddr6(1, 11))
				for _, l := range []string{vmLink(e1), vmLink(e2)} {
					vmWantIpvlan(t, ns, l, "d0", m.mode, f.flag)
				}
				ns.WantLinks(vmWith(vmLink(e1), vmLink(e2))...)
				vmWantJoin(t, m.name, j1, vmLink(e1), "198.18.1.1", "2001:db8:1::1")
				vmWantJoin(t, m.name, j2, vmLink(e2), "198.18.1.1", "2001:db8:1::1")

				// Two containers set up from the answers, as libnetwork does.
				sb1, sb2 := itest.NewNetns(t), itest.NewNetns(t)
				eth1 := itest.JoinSandbox(ns, sb1, j1, vmAddr4(1, 10), vmAddr6(1, 10))
				eth2 := itest.JoinSandbox(ns, sb2, j2, vmAddr4(1, 11), vmAddr6(1, 11))
				for _, sb := range []*itest.Netns{sb1, sb2} {
					if iv, ok := sb.MustLink("eth0").(*netlink.IPVlan); !ok || iv.Mode != m.mode || iv.Flag != f.flag {
						t.Fatalf("eth0 in the container: %+v", sb.MustLink("eth0"))
					}
				}
				ns.WantLinks(vmBase...)
				if f.name == "bridge" {
					for _, c := range []struct {
						from *itest.Netns
						src  string
						to   *itest.Netns
						dst  string
					}{
						{sb1, vmAddr4(1, 10), sb2, vmAddr4(1, 11)}, {sb2, vmAddr4(1, 11), sb1, vmAddr4(1, 10)},
						{sb1, vmAddr6(1, 10), sb2, vmAddr6(1, 11)}, {sb2, vmAddr6(1, 11), sb1, vmAddr6(1, 10)},
					} {
						if err := itest.UDPReach(c.from, vmIP(c.src), c.to, vmIP(c.dst), 5*time.Second); err != nil {
							t.Fatalf("ipvlan %s/%s: %v", m.name, f.name, err)
						}
					}
				} else if err := itest.UDPReach(sb1, vmIP(vmAddr4(1, 10)), sb2, vmIP(vmAddr4(1, 11)), 300*time.Millisecond); err == nil {
					t.Fatalf("ipvlan %s/%s: a datagram crossed between two endpoints of the parent, which the flag forbids", m.name, f.name)
				}

				itest.LeaveSandbox(ns, sb1, eth1, vmLink(e1))
				itest.LeaveSandbox(ns, sb2, eth2, vmLink(e2))
				d.RemoveEndpoint(n, e1)
				d.RemoveEndpoint(n, e2)
				d.DeleteNetwork(n)
				ns.WantLinks(vmBase...)
			})
		}
	}
}

// vmWantJoin checks a Join answer for an ipvlan mode: l2 gets the gateways
// (plain addresses), l3 and l3s connected default routes and no gateway.
func vmWantJoin(t *testing.T, mode string, j network.JoinResponse, src, gw4, gw6 string) {
	t.Helper()
	if j.InterfaceName.SrcName != src || j.InterfaceName.DstPrefix != "eth" || !j.DisableGatewayService {
		t.Fatalf("Join answered %+v: want SrcName %s, DstPrefix eth, DisableGatewayService", j, src)
	}
	var routes []string
	for _, r := range j.StaticRoutes {
		routes = append(routes, fmt.Sprintf("%s type %d via %q", r.Destination, r.RouteType, r.NextHop))
	}
	got := fmt.Sprintf("gateway %q gateway6 %q routes %v", j.Gateway, j.GatewayIPv6, routes)
	var want string
	switch {
	case mode == "l2":
		want = fmt.Sprintf("gateway %q gateway6 %q routes []", gw4, gw6)
	case gw4 != "" && gw6 != "":
		want = `gateway "" gateway6 "" routes [0.0.0.0/0 type 1 via "" ::/0 type 1 via ""]`
	case gw4 != "":
		want = `gateway "" gateway6 "" routes [0.0.0.0/0 type 1 via ""]`
	default:
		want = `gateway "" gateway6 "" routes [::/0 type 1 via ""]`
	}
	if got != want {
		t.Fatalf("ipvlan %s Join answered %s, want %s", mode, got, want)
	}
}

// Single-stack networks get the routes or the gateway of their family only.
func TestVMIpvlanSingleStackJoin(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	for i, tc := range []struct {
		mode     string
		v4, v6   bool
		gw4, gw6 string
	}{
		{"l2", true, false, "198.18.1.1", ""},
		{"l2", false, true, "", "2001:db8:2::1"},
		{"l3", true, false, "198.18.3.1", ""},
		{"l3s", false, true, "", "2001:db8:4::1"},
	} {
		x := i + 1
		// Each on a VLAN parent of its own: all ipvlan links on one parent
		// share one mode.
		nw := itest.Net{ID: vmNet(x), Opts: map[string]string{"parent": fmt.Sprintf("d0.%d", 100+x), "type": "ipvlan", "ipvlan_mode": tc.mode}}
		var addr, addr6 string
		if tc.v4 {
			nw.V4, addr = vmPool4(x), vmAddr4(x, 10)
		}
		if tc.v6 {
			nw.V6, addr6 = vmPool6(x), vmAddr6(x, 10)
		}
		d.MustCreateNetwork(nw)
		j := vmJoin(d, vmNet(x), vmEp(x), addr, addr6)
		vmWantJoin(t, tc.mode, j, vmLink(vmEp(x)), tc.gw4, tc.gw6)
		d.RemoveEndpoint(vmNet(x), vmEp(x))
		d.DeleteNetwork(vmNet(x))
	}
	ns.WantLinks(vmBase...)
}

// ipvlan endpoints share the parent's MAC: a MAC Docker was asked for
// (docker run --mac-address) is refused with a message that says why and
// what to do, and nothing is recorded or created.
func TestVMIpvlanCustomMACRefused(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	n := vmNet(1)
	d.MustCreateNetwork(itest.Net{ID: n, Opts: map[string]string{"parent": "d0", "type": "ipvlan"}, V4: vmPool4(1)})
	msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: n, EndpointID: vmEp(1),
		Interface: &network.EndpointInterface{Address: vmAddr4(1, 10), MacAddress: "02:42:c6:12:01:0b"}}, nil)
	for _, want := range []string{"02:42:c6:12:01:0b", "ipvlan", "MAC", "d0", "--mac-address"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("ipvlan endpoint with a MAC answered %q, want a refusal mentioning %q", msg, want)
		}
	}
	if msg := d.Call("Join", network.JoinRequest{NetworkID: n, EndpointID: vmEp(1)}, nil); !strings.Contains(msg, vmEp(1)[:12]) {
		t.Fatalf("Join of the refused endpoint answered %q, want endpoint %s unknown", msg, vmEp(1)[:12])
	}
	ns.WantLinks(vmBase...)
	// The same endpoint without the MAC works.
	j := vmJoin(d, n, vmEp(1), vmAddr4(1, 10), "")
	vmWantJoin(t, "l2", j, vmLink(vmEp(1)), "198.18.1.1", "")
	vmWantIpvlan(t, ns, vmLink(vmEp(1)), "d0", netlink.IPVLAN_MODE_L2, netlink.IPVLAN_FLAG_BRIDGE)
	d.RemoveEndpoint(n, vmEp(1))
	d.DeleteNetwork(n)
	ns.WantLinks(vmBase...)
	wantRecords(t, d, 0)
}
