package config

import (
	"errors"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
)

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       map[string]string
		typ, mode  string
		flag       string
		mtu        int
		errSubstrs []string
	}{
		{name: "defaults", opts: map[string]string{"parent": "eth0"}, typ: "macvlan", mode: "bridge"},
		{name: "macvlan modes", opts: map[string]string{"macvlan_mode": "passthru"}, typ: "macvlan", mode: "passthru"},
		{name: "ipvlan default mode", opts: map[string]string{"type": "ipvlan"}, typ: "ipvlan", mode: "l2", flag: "bridge"},
		{name: "ipvlan_mode implies ipvlan", opts: map[string]string{"ipvlan_mode": "l3s"}, typ: "ipvlan", mode: "l3s", flag: "bridge"},
		{name: "ipvlan_flag implies ipvlan", opts: map[string]string{"ipvlan_flag": "private"}, typ: "ipvlan", mode: "l2", flag: "private"},
		{name: "mtu", opts: map[string]string{"mtu": "1400"}, typ: "macvlan", mode: "bridge", mtu: 1400},
		{name: "mtu min", opts: map[string]string{"mtu": "68"}, typ: "macvlan", mode: "bridge", mtu: 68},
		{name: "empty ipvlan_mode is the default, not ipvlan", opts: map[string]string{"parent": "eth0", "ipvlan_mode": ""}, typ: "macvlan", mode: "bridge"},
		{name: "empty values are all defaults", opts: map[string]string{"type": "", "macvlan_mode": "", "ipvlan_flag": "", "mtu": ""}, typ: "macvlan", mode: "bridge"},
		{name: "empty macvlan_mode with ipvlan is no contradiction", opts: map[string]string{"type": "ipvlan", "macvlan_mode": ""}, typ: "ipvlan", mode: "l2", flag: "bridge"},
		{name: "unknown key", opts: map[string]string{"parnet": "eth0"}, errSubstrs: []string{`"parnet"`, "parent", "macvlan_mode"}},
		{name: "bad type", opts: map[string]string{"type": "vxlan"}, errSubstrs: []string{`"vxlan"`, "macvlan", "ipvlan"}},
		{name: "macvlan_mode with ipvlan", opts: map[string]string{"type": "ipvlan", "macvlan_mode": "bridge"}, errSubstrs: []string{"macvlan_mode=bridge", "type=ipvlan"}},
		{name: "ipvlan_mode with macvlan", opts: map[string]string{"type": "macvlan", "ipvlan_mode": "l2"}, errSubstrs: []string{"ipvlan_mode=l2", "type=macvlan"}},
		{name: "ipvlan_flag with macvlan", opts: map[string]string{"type": "macvlan", "ipvlan_flag": "vepa"}, errSubstrs: []string{"ipvlan_flag=vepa", "type=macvlan"}},
		{name: "bad macvlan mode", opts: map[string]string{"macvlan_mode": "source"}, errSubstrs: []string{`"source"`, "passthru"}},
		{name: "bad ipvlan mode", opts: map[string]string{"ipvlan_mode": "l4"}, errSubstrs: []string{`"l4"`, "l3s"}},
		{name: "bad ipvlan flag", opts: map[string]string{"ipvlan_flag": "open"}, errSubstrs: []string{`"open"`, "vepa"}},
		{name: "mtu too small", opts: map[string]string{"mtu": "67"}, errSubstrs: []string{`"67"`, "68"}},
		{name: "mtu too big", opts: map[string]string{"mtu": "65536"}, errSubstrs: []string{`"65536"`}},
		{name: "mtu not a number", opts: map[string]string{"mtu": "big"}, errSubstrs: []string{`"big"`}},
		{name: "parent lo", opts: map[string]string{"parent": "lo"}, errSubstrs: []string{"lo", "loopback"}},
		{name: "parent too long", opts: map[string]string{"parent": "averyveryverylongname"}, errSubstrs: []string{"averyveryverylongname", "15 bytes"}},
		{name: "parent with slash", opts: map[string]string{"parent": "eth0/1"}, errSubstrs: []string{`"eth0/1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOptions(tc.opts)
			if tc.errSubstrs != nil {
				drivertest.WantErr(t, err, pluginapi.ErrInvalid, tc.errSubstrs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Type != tc.typ || o.Mode != tc.mode || o.Flag != tc.flag || o.MTU != tc.mtu {
				t.Fatalf("got %+v, want type %s mode %s flag %s mtu %d", o, tc.typ, tc.mode, tc.flag, tc.mtu)
			}
		})
	}
}

func TestParseNetwork(t *testing.T) {
	good := drivertest.CreateReq(drivertest.NetReq{ID: drivertest.NetA, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}})
	n, err := ParseNetwork(good)
	if err != nil {
		t.Fatal(err)
	}
	if n.IPv4[0].Gateway != "198.18.1.1" || n.IPv6[0].Gateway != "2001:db8:1::1" || n.Internal {
		t.Fatalf("parsed %+v", n)
	}

	internal, err := ParseNetwork(drivertest.CreateReq(drivertest.NetReq{ID: drivertest.NetA, V4: []string{"198.18.1.0/24"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !internal.Internal || internal.Parent != "uliaaaaaaaaaaaa" {
		t.Fatalf("no parent: got internal=%v parent=%s, want an internal network on its dummy", internal.Internal, internal.Parent)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*network.CreateNetworkRequest)
		want   []string
	}{
		{"no ID", func(r *network.CreateNetworkRequest) { r.NetworkID = "" }, []string{"NetworkID"}},
		{"no IPAM data", func(r *network.CreateNetworkRequest) { r.IPv4Data, r.IPv6Data = nil, nil }, []string{"no IPAM data"}},
		{"empty pool", func(r *network.CreateNetworkRequest) { r.IPv4Data[0].Pool = "" }, []string{"no Pool"}},
		{"nil pool entry", func(r *network.CreateNetworkRequest) { r.IPv4Data[0] = nil }, []string{"no Pool"}},
		{"bad pool", func(r *network.CreateNetworkRequest) { r.IPv4Data[0].Pool = "198.18.1.0/33" }, []string{"198.18.1.0/33"}},
		{"v6 pool in v4 data", func(r *network.CreateNetworkRequest) { r.IPv4Data[0].Pool = "2001:db8::/64" }, []string{"2001:db8::/64", "IPv4"}},
		{"v4 pool in v6 data", func(r *network.CreateNetworkRequest) { r.IPv6Data[0].Pool = "198.18.9.0/24" }, []string{"198.18.9.0/24", "IPv6"}},
		{"broken v6", func(r *network.CreateNetworkRequest) { r.IPv6Data[0].Pool = "2001:db8:::/64" }, []string{"2001:db8:::/64"}},
		{"gateway outside pool", func(r *network.CreateNetworkRequest) { r.IPv4Data[0].Gateway = "198.18.2.1/24" }, []string{"198.18.2.1", "outside"}},
		{"bad gateway", func(r *network.CreateNetworkRequest) { r.IPv4Data[0].Gateway = "gw" }, []string{`"gw"`}},
		{"overlapping pools", func(r *network.CreateNetworkRequest) {
			r.IPv4Data = append(r.IPv4Data, &network.IPAMData{Pool: "198.18.1.128/25"})
		}, []string{"198.18.1.128/25", "overlap"}},
		{"generic not a map", func(r *network.CreateNetworkRequest) { r.Options[LabelGeneric] = "parent=eth0" }, []string{LabelGeneric}},
		{"option not a string", func(r *network.CreateNetworkRequest) { r.Options[LabelGeneric] = map[string]any{"mtu": 1400.0} }, []string{`"mtu"`, "string"}},
		{"internal not a bool", func(r *network.CreateNetworkRequest) { r.Options[LabelInternal] = 3.0 }, []string{LabelInternal}},
		{"ipv6 flag garbage", func(r *network.CreateNetworkRequest) { r.Options[labelEnableIPv6] = "maybe" }, []string{labelEnableIPv6, `"maybe"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := drivertest.CreateReq(drivertest.NetReq{ID: drivertest.NetA, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64"}})
			tc.mutate(req)
			_, err := ParseNetwork(req)
			drivertest.WantErr(t, err, pluginapi.ErrInvalid, tc.want...)
		})
	}
}

func TestNames(t *testing.T) {
	if got := EndpointLinkName(drivertest.EpA); got != "uleeaeaeaeaeaea" || len(got) != 15 {
		t.Fatalf("endpointLinkName = %q", got)
	}
	if got := EndpointLinkName("ep1"); !IsEndpointLinkName(got) || len(got) != 15 {
		t.Fatalf("endpointLinkName of a non-hex ID = %q", got)
	}
	if AltEndpointLinkName(drivertest.EpA) == EndpointLinkName(drivertest.EpA) {
		t.Fatal("alternative name equals the primary one")
	}
	if got := DummyName(drivertest.NetA); got != "uliaaaaaaaaaaaa" || !IsDummyName(got) {
		t.Fatalf("dummyName = %q", got)
	}
	for _, name := range []string{"eth0", "ule", "uleeaeaeaeaeaea0"} {
		if IsEndpointLinkName(name) {
			t.Errorf("%q taken for an endpoint link name", name)
		}
	}
	if !errors.Is(Invalidf("x"), pluginapi.ErrInvalid) {
		t.Fatal("invalidf does not wrap ErrInvalid")
	}
}
