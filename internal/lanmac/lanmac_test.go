package lanmac

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

func TestMACBase(t *testing.T) {
	nic := kernel.Link{Name: "eth0", Index: 2, Kind: "device", MAC: "52:54:00:00:00:01", PermMAC: "52:54:00:00:00:99"}
	for _, tc := range []struct {
		name  string
		p     kernel.Link
		links []kernel.Link
		want  string
	}{
		{"permanent address", nic, nil, "52:54:00:00:00:99"},
		{"no permanent address", kernel.Link{Kind: "veth", MAC: "52:54:00:00:00:02"}, nil, "52:54:00:00:00:02"},
		{"vlan: its base's permanent address", kernel.Link{Kind: "vlan", ParentIndex: 2, VLAN: 10, MAC: "52:54:00:00:00:01"}, []kernel.Link{nic}, "52:54:00:00:00:99"},
		{"vlan, base unknown", kernel.Link{Kind: "vlan", ParentIndex: 7, MAC: "52:54:00:00:00:03"}, []kernel.Link{nic}, "52:54:00:00:00:03"},
	} {
		if got := MACBase(tc.p, tc.links).String(); got != tc.want {
			t.Errorf("%s: base %s, want %s", tc.name, got, tc.want)
		}
	}
	base, _ := net.ParseMAC("52:54:00:00:00:99")
	a := netip.MustParseAddr("198.18.1.10")
	// Fixed vectors (computed independently: SHA-256 over "underlay stable
	// MAC v1\x00", the base's 6 bytes, the VLAN ID as 2 bytes big-endian and
	// the address's 16-byte form, IPv4 as ::ffff:a.b.c.d; the first 6 bytes
	// with 0x02 set and 0x01 cleared in the first). A change here changes
	// every container's MAC on upgrade.
	for _, v := range []struct {
		vlan int
		addr string
		want string
	}{
		{0, "198.18.1.10", "46:e3:5e:c7:fa:e6"},
		{10, "198.18.1.10", "16:d7:67:47:2e:cb"},
		{0, "2001:db8::10", "d2:7b:d6:31:70:67"},
	} {
		if got := StableMAC(base, v.vlan, netip.MustParseAddr(v.addr)).String(); got != v.want {
			t.Errorf("StableMAC(%s, %d, %s) = %s, want %s", base, v.vlan, v.addr, got, v.want)
		}
	}
	if StableMAC(base, 0, a).String() == StableMAC(base, 10, a).String() {
		t.Error("the same address on two VLANs of one NIC got one MAC")
	}
	if StableMAC(base, 0, a).String() == StableMAC(base, 0, netip.MustParseAddr("2001:db8::c612:10a")).String() {
		t.Error("two addresses got one MAC")
	}
}

func TestNameMAC(t *testing.T) {
	base, _ := net.ParseMAC("52:54:00:00:00:99")
	other, _ := net.ParseMAC("52:54:00:00:00:98")
	// Fixed vectors (computed independently, with Python's hashlib: SHA-256 over "underlay name MAC v1\x00", the base's 6
	// bytes, the VLAN ID as 2 bytes big-endian and the name; the first 6
	// bytes with 0x02 set and 0x01 cleared in the first). A change here
	// changes every named container's MAC, and its DHCP lease, on upgrade.
	for _, v := range []struct {
		vlan       int
		name, want string
	}{
		{0, "web", "52:31:86:b0:b1:32"},
		{0, "/web", "52:31:86:b0:b1:32"},
		{10, "web", "c6:3c:45:7f:a3:cc"},
		{0, "proj-web-1", "7e:e8:5b:b2:2a:da"},
	} {
		if got := NameMAC(base, v.vlan, v.name).String(); got != v.want {
			t.Errorf("NameMAC(%s, %d, %q) = %s, want %s", base, v.vlan, v.name, got, v.want)
		}
	}
	seen := map[string]string{}
	for _, n := range []string{"a", "b", "web", "web-1", "proj-web-1", "proj-web-2"} {
		m := NameMAC(base, 0, n)
		if m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("NameMAC(%q) = %s: not a locally administered unicast MAC", n, m)
		}
		if prev, dup := seen[m.String()]; dup {
			t.Errorf("names %q and %q got one MAC %s", prev, n, m)
		}
		seen[m.String()] = n
	}
	if NameMAC(base, 0, "web").String() == NameMAC(other, 0, "web").String() {
		t.Error("one name on two parents got one MAC")
	}
}

func TestHostLabel(t *testing.T) {
	for _, v := range []struct {
		name, want string
		ok         bool
	}{
		{"web", "web", true},
		{"/proj-web-1", "proj-web-1", true},
		{"my_app.v2", "my-app-v2", true},
		{"_x_", "x", true},
		{"___", "", false},
		{strings.Repeat("a", 70), strings.Repeat("a", 63), true},
		{strings.Repeat("a", 62) + "_b", strings.Repeat("a", 62), true},
	} {
		got, ok := HostLabel(v.name)
		if got != v.want || ok != v.ok {
			t.Errorf("HostLabel(%q) = %q, %v, want %q, %v", v.name, got, ok, v.want, v.ok)
		}
	}
}
