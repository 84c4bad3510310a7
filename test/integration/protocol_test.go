package integration

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

func TestActivateCapabilitiesAndScope(t *testing.T) {
	t.Parallel()
	_, d := setup(t, itest.DaemonOptions{})
	code, body, err := d.Post("/Plugin.Activate", nil)
	if err != nil || code != 200 || !strings.Contains(string(body), `"Implements":["NetworkDriver","IpamDriver"]`) {
		t.Fatalf("Activate: %d %s %v", code, body, err)
	}
	var caps network.CapabilitiesResponse
	d.MustCall("GetCapabilities", nil, &caps)
	if caps.Scope != "local" || caps.ConnectivityScope != "global" {
		t.Fatalf("capabilities %+v", caps)
	}
	code, body, _ = d.Post("/NetworkDriver.Unknown", "{}")
	if code != 404 || !strings.Contains(string(body), "Err") {
		t.Fatalf("unknown route: %d %s", code, body)
	}
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode().Perm()&0o007 != 0 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v (%v): want a socket closed to others", fi.Mode(), err)
	}

	ns := itest.NewNetns(t)
	g := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--scope", "global"}})
	g.MustCall("GetCapabilities", nil, &caps)
	if caps.Scope != "global" {
		t.Fatalf("--scope global answered %+v", caps)
	}
	e := itest.StartDaemon(t, itest.NewNetns(t), itest.DaemonOptions{Env: []string{"SCOPE=global"}})
	e.MustCall("GetCapabilities", nil, &caps)
	if caps.Scope != "global" {
		t.Fatalf("SCOPE=global answered %+v", caps)
	}
	w := itest.StartDaemon(t, itest.NewNetns(t), itest.DaemonOptions{Env: []string{"SCOPE=global"}, Args: []string{"--scope", "local"}})
	w.MustCall("GetCapabilities", nil, &caps)
	if caps.Scope != "local" {
		t.Fatalf("--scope local with SCOPE=global answered %+v: flags must win", caps)
	}
}

func TestMacvlanEndpointLifecycle(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp1", "mtu": "9000"},
		V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}})
	ce, j := d.Endpoint(netA, epA, "198.18.1.10/24", "2001:db8:1::10/64", "")
	if ce.Interface == nil || ce.Interface.Address != "" || ce.Interface.AddressIPv6 != "" {
		t.Fatalf("CreateEndpoint answered %+v: want only a MAC", ce.Interface)
	}
	mac, err := net.ParseMAC(ce.Interface.MacAddress)
	if err != nil || mac[0]&3 != 2 {
		t.Fatalf("generated MAC %q is not locally administered unicast", ce.Interface.MacAddress)
	}
	if j.InterfaceName.SrcName != linkA || j.InterfaceName.DstPrefix != "eth" || !j.DisableGatewayService ||
		j.Gateway != "198.18.1.1" || j.GatewayIPv6 != "2001:db8:1::1" || len(j.StaticRoutes) != 0 {
		t.Fatalf("Join answered %+v", j)
	}
	l := ns.MustLink(linkA)
	mv, ok := l.(*netlink.Macvlan)
	if !ok || mv.Mode != netlink.MACVLAN_MODE_BRIDGE || ns.ParentName(l) != "vp1" || l.Attrs().MTU != 9000 ||
		l.Attrs().HardwareAddr.String() != mac.String() {
		t.Fatalf("link %s: %T mode %v parent %s mtu %d mac %s", linkA, l, modeOf(l), ns.ParentName(l), l.Attrs().MTU, l.Attrs().HardwareAddr)
	}
	var info network.InfoResponse
	d.MustCall("EndpointOperInfo", network.InfoRequest{NetworkID: netA, EndpointID: epA}, &info)
	if info.Value["link"] != linkA || info.Value["parent"] != "vp1" {
		t.Fatalf("EndpointOperInfo %+v", info)
	}
	// A MAC Docker gives is used as is and not answered back.
	ce, _ = d.Endpoint(netA, epB, "198.18.1.11/24", "", "02:42:c6:12:01:0b")
	if ce.Interface != nil && ce.Interface.MacAddress != "" {
		t.Fatalf("CreateEndpoint echoed the MAC Docker gave: %+v", ce.Interface)
	}
	if got := ns.MustLink(linkB).Attrs().HardwareAddr.String(); got != "02:42:c6:12:01:0b" {
		t.Fatalf("link MAC %s, want 02:42:c6:12:01:0b", got)
	}
	d.RemoveEndpoint(netA, epA)
	d.RemoveEndpoint(netA, epB)
	ns.WantLinks(base...)
	d.DeleteNetwork(netA)
	for _, route := range []string{"DiscoverNew", "DiscoverDelete", "ProgramExternalConnectivity", "RevokeExternalConnectivity", "FreeNetwork"} {
		d.MustCall(route, map[string]any{"NetworkID": netA, "EndpointID": epA, "DiscoveryType": 1}, nil)
	}
	var alloc network.AllocateNetworkResponse
	d.MustCall("AllocateNetwork", network.AllocateNetworkRequest{NetworkID: netB, Options: map[string]string{"parent": "vp0", "macvlan_mode": "private"}}, &alloc)
	if alloc.Options["parent"] != "vp0" || alloc.Options["macvlan_mode"] != "private" {
		t.Fatalf("AllocateNetwork answered %+v", alloc)
	}
}

func modeOf(l netlink.Link) any {
	switch v := l.(type) {
	case *netlink.Macvlan:
		return v.Mode
	case *netlink.IPVlan:
		return v.Mode
	}
	return nil
}

func TestMacvlanModesOnVeth(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	for i, tc := range []struct {
		mode string
		want netlink.MacvlanMode
	}{{"bridge", netlink.MACVLAN_MODE_BRIDGE}, {"private", netlink.MACVLAN_MODE_PRIVATE}, {"vepa", netlink.MACVLAN_MODE_VEPA}, {"passthru", netlink.MACVLAN_MODE_PASSTHRU}} {
		d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "macvlan_mode": tc.mode}, V4: []string{"198.18.1.0/24"}})
		d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
		l := ns.MustLink(linkA)
		if mv, ok := l.(*netlink.Macvlan); !ok || mv.Mode != tc.want {
			t.Fatalf("macvlan_mode=%s: link mode %v", tc.mode, modeOf(l))
		}
		d.RemoveEndpoint(netA, epA)
		d.DeleteNetwork(netA)
		ns.WantLinks(base...)
		_ = i
	}
}

func TestMTUOption(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "mtu": "1280"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	if got := ns.MustLink(linkA).Attrs().MTU; got != 1280 {
		t.Fatalf("endpoint MTU %d, want 1280", got)
	}
	msg := d.CreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0", "mtu": "9000"}, V4: []string{"198.18.2.0/24"}})
	for _, want := range []string{"mtu 9000", "1500", "vp0"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("MTU above the parent's answered %q, want it to mention %q", msg, want)
		}
	}
}

func TestInvalidRequestsAnswerErrors(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	for _, tc := range []struct {
		route, body string
		want        string
	}{
		{"CreateNetwork", `{"NetworkID":`, "not a valid JSON"},
		{"CreateNetwork", `{"NetworkID":["x"]}`, "NetworkID"},
		{"CreateNetwork", netJSON(netA, `{"parent":"vp0","bogus":"1"}`), `"bogus"`},
		{"CreateNetwork", netJSON(netA, `{"parent":"vp0","macvlan_mode":"weird"}`), `"weird"`},
		{"CreateNetwork", netJSON(netA, `{"parent":"lo"}`), "loopback"},
		{"CreateNetwork", netJSON(netA, `{"parent":"nosuchif0"}`), "nosuchif0"},
		{"CreateNetwork", netJSON(netA, `{"parent":"vp0.4095"}`), "4095"},
		{"CreateEndpoint", `{"NetworkID":"` + netC + `","EndpointID":"e"}`, "cccccccccccc"},
		{"Join", `{"NetworkID":"` + netC + `","EndpointID":"e"}`, "cccccccccccc"},
	} {
		if msg := d.Call(tc.route, tc.body, nil); !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s: answered %q, want an error mentioning %q", tc.route, tc.body, msg, tc.want)
		}
	}
	ns.WantLinks(base...)
	// The daemon is still serving.
	d.MustCall("GetCapabilities", nil, nil)
}

func netJSON(id, generic string) string {
	var g map[string]any
	if err := json.Unmarshal([]byte(generic), &g); err != nil {
		panic(err)
	}
	b, _ := json.Marshal(map[string]any{"NetworkID": id, "Options": map[string]any{"com.docker.network.generic": g},
		"IPv4Data": []map[string]string{{"Pool": "198.18.1.0/24", "Gateway": "198.18.1.1/24"}}})
	return string(b)
}
