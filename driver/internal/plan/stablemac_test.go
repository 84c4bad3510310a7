package plan

import (
	"net"
	"net/netip"
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
