package lan

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store/record"
)

const (
	nicMAC  = "52:54:00:00:00:01"
	nicPerm = "52:54:00:00:00:99"
)

// kernel holds eth0 (a NIC with a permanent address), eth0.10 on it (no
// permanent address, as VLAN links have none), veth0 (no permanent
// address) and nomac0 (no address at all).
func macKernel(t *testing.T) *nltest.Kernel {
	t.Helper()
	k := nltest.New()
	k.AddLink(kernel.Link{Name: "eth0", Kind: "device", MTU: 1500, MAC: nicMAC, PermMAC: nicPerm})
	eth0, _ := k.Link("eth0")
	k.AddLink(kernel.Link{Name: "eth0.10", Kind: kernel.KindVLAN, ParentIndex: eth0.Index, VLAN: 10, MTU: 1500, MAC: nicMAC})
	k.AddLink(kernel.Link{Name: "veth0", Kind: "veth", MTU: 1500, MAC: "52:54:00:00:00:02"})
	k.AddLink(kernel.Link{Name: "nomac0", Kind: "device", MTU: 1500})
	return k
}

func network(parent string, opts map[string]string) record.Network {
	n := drivertest.Macvlan(drivertest.NetA, parent, "bridge", "192.0.2.0/24")
	n.Options = opts
	n.Config, _ = config.ConfigFromOptions(opts, n.Type) // as CreateNetwork parses them
	return n
}

func ep(ipv4, ipv6 string) record.Endpoint {
	return record.Endpoint{NetworkID: drivertest.NetA, ID: drivertest.EpA, IPv4: ipv4, IPv6: ipv6}
}

func stable(base string, vlan int, addr string) string {
	hw, _ := net.ParseMAC(base)
	return lanmac.StableMAC(hw, vlan, netip.MustParseAddr(addr)).String()
}

// isRandom: a locally administered unicast MAC that is not the stable one.
func isRandom(t *testing.T, got, notStable string) {
	t.Helper()
	hw, err := net.ParseMAC(got)
	if err != nil || len(hw) != 6 {
		t.Fatalf("Choose = %q, not a MAC", got)
	}
	if hw[0]&0x02 == 0 || hw[0]&0x01 != 0 {
		t.Fatalf("Choose = %s, want a locally administered unicast MAC", got)
	}
	if notStable != "" && got == notStable {
		t.Fatalf("Choose = %s, the stable MAC; want a random one", got)
	}
}

func TestChooseStable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent string
		ep     record.Endpoint
		want   string
	}{
		{"the NIC's permanent address and the IPv4 address", "eth0", ep("192.0.2.10/24", ""), stable(nicPerm, 0, "192.0.2.10")},
		{"IPv4 before IPv6", "eth0", ep("192.0.2.10/24", "2001:db8::10/64"), stable(nicPerm, 0, "192.0.2.10")},
		{"IPv6 alone", "eth0", ep("", "2001:db8::10/64"), stable(nicPerm, 0, "2001:db8::10")},
		{"a VLAN: its base's permanent address and its ID", "eth0.10", ep("192.0.2.10/24", ""), stable(nicPerm, 10, "192.0.2.10")},
		{"no permanent address: the current one", "veth0", ep("192.0.2.10/24", ""), stable("52:54:00:00:00:02", 0, "192.0.2.10")},
		{"the parent by altname", "lan0", ep("192.0.2.10/24", ""), stable(nicPerm, 0, "192.0.2.10")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := macKernel(t)
			k.AddAltName("eth0", "lan0")
			c := &Chooser{Links: k, Log: slog.New(slog.DiscardHandler)}
			got := c.Choose(context.Background(), network(tc.parent, nil), tc.ep, nil)
			if got != tc.want {
				t.Fatalf("Choose = %s, want the stable %s", got, tc.want)
			}
			// Stable: the same again, for a new endpoint of the address.
			again := tc.ep
			again.ID = drivertest.EpB
			if got2 := c.Choose(context.Background(), network(tc.parent, map[string]string{config.OptMacAddressPolicy: config.MacStable}), again, nil); got2 != got {
				t.Fatalf("Choose again = %s, want %s", got2, got)
			}
		})
	}
}

// TestStableMACPinned: the derivation a host's endpoints keep across
// upgrades (a DHCP reservation or a switch's port security may name it).
func TestStableMACPinned(t *testing.T) {
	c := &Chooser{Links: macKernel(t), Log: slog.New(slog.DiscardHandler)}
	got := c.Choose(context.Background(), network("eth0", nil), ep("192.0.2.10/24", ""), nil)
	if want := "6e:30:6e:fa:6f:41"; got != want {
		t.Fatalf("the stable MAC of 192.0.2.10 on %s is %s, was %s: stable MACs must not change", nicPerm, got, want)
	}
}

func TestChooseDistinct(t *testing.T) {
	c := &Chooser{Links: macKernel(t), Log: slog.New(slog.DiscardHandler)}
	a := c.Choose(context.Background(), network("eth0", nil), ep("192.0.2.10/24", ""), nil)
	b := c.Choose(context.Background(), network("eth0", nil), ep("192.0.2.11/24", ""), nil)
	v := c.Choose(context.Background(), network("eth0.10", nil), ep("192.0.2.10/24", ""), nil)
	if a == b || a == v || b == v {
		t.Fatalf("stable MACs %s (.10 on eth0), %s (.11 on eth0), %s (.10 on eth0.10) are not distinct", a, b, v)
	}
}

func TestChooseExisting(t *testing.T) {
	c := &Chooser{Links: macKernel(t), Log: slog.New(slog.DiscardHandler)}
	existing := &record.Endpoint{ID: drivertest.EpA, MAC: "02:aa:bb:cc:dd:ee"}
	for _, opts := range []map[string]string{nil, {config.OptMacAddressPolicy: config.MacRandom}} {
		if got := c.Choose(context.Background(), network("eth0", opts), ep("192.0.2.10/24", ""), existing); got != existing.MAC {
			t.Fatalf("Choose with a record = %s, want the MAC it had %s", got, existing.MAC)
		}
	}
	// A record without a MAC is chosen for anew.
	if got := c.Choose(context.Background(), network("eth0", nil), ep("192.0.2.10/24", ""), &record.Endpoint{ID: drivertest.EpA}); got != stable(nicPerm, 0, "192.0.2.10") {
		t.Fatalf("Choose with a record without MAC = %s, want the stable one", got)
	}
}

// TestChooseRandom: every case the stable MAC does not apply to, or
// cannot be made or used, gets a random MAC, and reads no more than
// needed.
func TestChooseRandom(t *testing.T) {
	boom := errors.New("netlink: operation failed")
	want := stable(nicPerm, 0, "192.0.2.10")
	for _, tc := range []struct {
		name  string
		n     record.Network
		ep    record.Endpoint
		fault func(op, name string) error
		setup func(k *nltest.Kernel)
		reads bool // the kernel is read
	}{
		{name: "policy random", n: network("eth0", map[string]string{config.OptMacAddressPolicy: config.MacRandom}), ep: ep("192.0.2.10/24", "")},
		{name: "policy not valid", n: network("eth0", map[string]string{config.OptMacAddressPolicy: "fixed"}), ep: ep("192.0.2.10/24", "")},
		{name: "no address", n: network("eth0", nil), ep: ep("", "")},
		{name: "DHCP network", n: network("eth0", map[string]string{config.OptDHCP: "true"}), ep: ep("192.0.2.10/24", "")},
		{name: "parent unreadable", n: network("eth0", nil), ep: ep("192.0.2.10/24", ""), reads: true,
			fault: func(op, _ string) error {
				if op == "get" {
					return boom
				}
				return nil
			}},
		{name: "links not listed", n: network("eth0", nil), ep: ep("192.0.2.10/24", ""), reads: true,
			fault: func(op, _ string) error {
				if op == "list" {
					return boom
				}
				return nil
			}},
		{name: "parent missing", n: network("eth9", nil), ep: ep("192.0.2.10/24", ""), reads: true},
		{name: "parent without a MAC", n: network("nomac0", nil), ep: ep("192.0.2.10/24", ""), reads: true},
		{name: "the stable MAC is on a link of the parent", n: network("eth0", nil), ep: ep("192.0.2.10/24", ""), reads: true,
			setup: func(k *nltest.Kernel) {
				eth0, _ := k.Link("eth0")
				k.AddLink(kernel.Link{Name: "mv0", Kind: kernel.KindMacvlan, ParentIndex: eth0.Index, MTU: 1500, MAC: want})
			}},
		{name: "the stable MAC is the parent's own", n: network("eth0", nil), ep: ep("192.0.2.10/24", ""), reads: true,
			setup: func(k *nltest.Kernel) {
				k.Remove("eth0")
				k.AddLink(kernel.Link{Name: "eth0", Kind: "device", MTU: 1500, MAC: want, PermMAC: nicPerm})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := macKernel(t)
			if tc.setup != nil {
				tc.setup(k)
			}
			k.SetFault(tc.fault)
			c := &Chooser{Links: k, Log: slog.New(slog.DiscardHandler)}
			got := c.Choose(context.Background(), tc.n, tc.ep, nil)
			isRandom(t, got, want)
			if again := c.Choose(context.Background(), tc.n, tc.ep, nil); again == got {
				t.Fatalf("Choose twice = %s both times; want a new random MAC each time", got)
			}
			if reads := k.Calls("get")+k.Calls("list") > 0; reads != tc.reads {
				t.Fatalf("kernel read: %v, want %v", reads, tc.reads)
			}
		})
	}
}

// TestChooseCollisionOtherParent: a link elsewhere with the stable MAC
// does not count (the kernel refuses duplicates per parent only).
func TestChooseCollisionOtherParent(t *testing.T) {
	k := macKernel(t)
	want := stable(nicPerm, 0, "192.0.2.10")
	veth, _ := k.Link("veth0")
	k.AddLink(kernel.Link{Name: "mv0", Kind: kernel.KindMacvlan, ParentIndex: veth.Index, MTU: 1500, MAC: want})
	c := &Chooser{Links: k, Log: slog.New(slog.DiscardHandler)}
	if got := c.Choose(context.Background(), network("eth0", nil), ep("192.0.2.10/24", ""), nil); got != want {
		t.Fatalf("Choose = %s, want the stable %s (its twin is on another parent)", got, want)
	}
}

func TestRandom(t *testing.T) {
	seen, first := map[string]bool{}, map[byte]bool{}
	for range 64 {
		m := lanmac.Random()
		if len(m) != 6 || m[0]&0x02 == 0 || m[0]&0x01 != 0 {
			t.Fatalf("Random = %s, want a locally administered unicast MAC", m)
		}
		seen[m.String()] = true
		first[m[0]] = true
	}
	if len(first) == 1 {
		t.Fatalf("Random's first byte is always %#x: only its two low bits are fixed", m0(first))
	}
	if len(seen) < 60 {
		t.Fatalf("Random gave %d distinct MACs of 64", len(seen))
	}
}

func m0(set map[byte]bool) byte {
	for b := range set {
		return b
	}
	return 0
}
