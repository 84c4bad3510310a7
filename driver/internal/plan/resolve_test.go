package plan

import (
	"strings"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// hostLinks is a link list as the kernel would dump it: eth0 (altname
// enp0s31f6) with a user's VLAN 20 named uv20 and underlay's eth0.10, a
// macvlan on eth0, a bridge of Docker's, and a long-named NIC.
func hostLinks() []kernel.Link {
	return []kernel.Link{
		{Name: "lo", Index: 1, Kind: "device", MTU: 65536},
		{Name: "eth0", Index: 2, Kind: "device", MTU: 1500, AltNames: []string{"enp0s31f6", "lan0"}},
		{Name: "uv20", Index: 3, Kind: "vlan", ParentIndex: 2, VLAN: 20, MTU: 1400},
		{Name: "eth0.10", Index: 4, Kind: "vlan", ParentIndex: 2, VLAN: 10, MTU: 1500, Alias: "underlay:x"},
		{Name: "mv0", Index: 5, Kind: "macvlan", ParentIndex: 2, MTU: 1500},
		{Name: "docker0", Index: 6, Kind: "bridge", MTU: 1500},
		{Name: "enx0123456789ab", Index: 7, Kind: "device", MTU: 9000},
		{Name: "ule0123456789ab", Index: 8, Kind: "macvlan", ParentIndex: 2, MTU: 1500},
		{Name: "eth0.5", Index: 9, Kind: "veth", MTU: 1500},
	}
}

func asking(parent string) record.Network {
	n := drivertest.Macvlan(drivertest.NetA, parent, "bridge", "198.18.1.0/24")
	n.Options = map[string]string{config.OptParent: parent}
	return n
}

func TestResolveParent(t *testing.T) {
	internal := drivertest.Macvlan(drivertest.NetA, config.DummyName(drivertest.NetA), "bridge", "198.18.1.0/24")
	internal.Options = map[string]string{}
	for _, tc := range []struct {
		name   string
		n      record.Network
		want   string
		create *record.ParentLink
		err    []string // substrings of the refusal
	}{
		{name: "existing link", n: asking("eth0"), want: "eth0"},
		{name: "altname is the link", n: asking("enp0s31f6"), want: "eth0"},
		{name: "another altname", n: asking("lan0"), want: "eth0"},
		{name: "existing VLAN by name", n: asking("eth0.10"), want: "eth0.10"},
		{name: "VLAN asked with a leading zero is the existing VLAN", n: asking("eth0.010"), want: "eth0.10"},
		{name: "VLAN asked on an altname is the existing VLAN", n: asking("lan0.10"), want: "eth0.10"},
		{name: "user's VLAN under another name is used", n: asking("eth0.20"), want: "uv20"},
		{name: "user's VLAN asked on an altname", n: asking("enp0s31f6.20"), want: "uv20"},
		{name: "new VLAN", n: asking("eth0.30"), want: "eth0.30",
			create: &record.ParentLink{Name: "eth0.30", Kind: kernel.KindVLAN, Base: "eth0", VLAN: 30}},
		{name: "new VLAN is named by the kernel name and decimal ID", n: asking("lan0.0030"), want: "eth0.30",
			create: &record.ParentLink{Name: "eth0.30", Kind: kernel.KindVLAN, Base: "eth0", VLAN: 30}},
		{name: "internal network gets its dummy", n: internal, want: config.DummyName(drivertest.NetA),
			create: &record.ParentLink{Name: config.DummyName(drivertest.NetA), Kind: kernel.KindDummy}},
		{name: "macvlan parent refused naming its lower link", n: asking("mv0"), err: []string{"mv0", "macvlan", "-o parent=eth0"}},
		{name: "endpoint link refused", n: asking("ule0123456789ab"), err: []string{"endpoint link"}},
		{name: "Docker's bridge refused", n: asking("docker0"), err: []string{"bridge Docker manages"}},
		{name: "loopback refused", n: asking("lo"), err: []string{"loopback"}},
		{name: "VLAN on loopback refused", n: asking("lo.5"), err: []string{"loopback"}},
		{name: "missing interface", n: asking("eth9"), err: []string{"eth9 does not exist"}},
		{name: "missing base", n: asking("eth9.5"), err: []string{"eth9 does not exist"}},
		{name: "the planned VLAN name is another link", n: asking("enx0123456789ab.5"), err: []string{"longer"}},
		{name: "the planned VLAN name is taken by a link that is not the VLAN", n: asking("eth0.005"), err: []string{"eth0.5", "not that VLAN", "remove or rename"}},
		{name: "VLAN ID out of range", n: asking("eth0.4095"), err: []string{"outside 1-4094"}},
		{name: "VLAN ID zero", n: asking("eth0.0"), err: []string{"outside 1-4094"}},
		{name: "signed VLAN ID is a name, not a VLAN", n: asking("eth0.+5"), err: []string{"does not exist"}},
		{name: "VLAN name too long for the kernel", n: asking("enx0123456789ab.100"), err: []string{"longer than the kernel's 15 bytes", "yourself"}},
		{name: "MTU above the found VLAN's", n: func() record.Network { n := asking("eth0.20"); n.MTU = 1500; return n }(), err: []string{"mtu 1500", "uv20", "1400"}},
		{name: "MTU above the base's", n: func() record.Network { n := asking("eth0.40"); n.MTU = 9000; return n }(), err: []string{"mtu 9000", "eth0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveParent(tc.n, hostLinks(), nil)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("resolved to %+v, want a refusal", got)
				}
				drivertest.WantErr(t, err, pluginapi.ErrInvalid, tc.err...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.want {
				t.Fatalf("resolved to %s, want %s", got.Name, tc.want)
			}
			switch {
			case tc.create == nil && got.Create != nil:
				t.Fatalf("plans to create %+v, want the existing link", *got.Create)
			case tc.create != nil && (got.Create == nil || *got.Create != *tc.create):
				t.Fatalf("plans %+v, want %+v", got.Create, *tc.create)
			}
		})
	}
}

func TestRequestedParentOfOlderRecords(t *testing.T) {
	old := drivertest.Macvlan(drivertest.NetA, "eth0.10", "bridge") // no Options: a record of an older version
	if got := RequestedParent(old); got != "eth0.10" {
		t.Fatalf("requested parent %q, want the stored link", got)
	}
	if got := RequestedParent(drivertest.Macvlan(drivertest.NetA, config.DummyName(drivertest.NetA), "bridge")); got != "" {
		t.Fatalf("an internal network's requested parent is %q, want none", got)
	}
}

func TestSameConfigComparesWhatWasAsked(t *testing.T) {
	a, b := asking("lan0"), asking("lan0")
	a.Parent = "eth0"
	b.Parent = "eth1" // resolved otherwise after a reboot: the same network
	if !SameConfig(a, b) {
		t.Fatal("networks asked alike differ because their resolution differs")
	}
	c := asking("eth0")
	c.Parent = a.Parent
	if SameConfig(a, c) {
		t.Fatal("networks asked with other parents compare equal because they resolve alike")
	}
	if !strings.Contains(ConflictError(a, "lan0", []Conflict{{Holder: drivertest.Macvlan(drivertest.NetB, "eth0", "passthru"), Reason: "r"}}).Error(), "lan0 (kernel link eth0)") {
		t.Fatal("the refusal does not say which link the asked parent is")
	}
}
