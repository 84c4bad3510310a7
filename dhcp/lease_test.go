package dhcp

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// ack is an ACK for addrA from serverA with the given options.
func ack(t *testing.T, opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
	t.Helper()
	mods := []dhcpv4.Modifier{dhcpv4.WithHwAddr(testMAC), dhcpv4.WithYourIP(addrA.AsSlice()),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply }}
	for _, o := range opts {
		mods = append(mods, dhcpv4.WithOption(o))
	}
	m, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dhcpv4.FromBytes(m.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func route(dst, gw string) *dhcpv4.Route {
	_, n, _ := net.ParseCIDR(dst)
	n.IP = net.ParseIP(strings.Split(dst, "/")[0]).To4() // keep host bits, as a sloppy server might
	return &dhcpv4.Route{Dest: n, Router: net.ParseIP(gw)}
}

func TestLeaseFromACK(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := []dhcpv4.Option{dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptIPAddressLeaseTime(2 * time.Minute)}
	mask := dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))
	l, err := leaseFromACK(ack(t, append(base, mask,
		dhcpv4.OptRouter(net.ParseIP("198.18.180.1")),
		dhcpv4.OptDNS(net.ParseIP("198.18.180.53"), net.ParseIP("198.18.180.54")),
		dhcpv4.OptClasslessStaticRoute(
			route("198.18.190.7/24", "198.18.180.1"), // host bits masked off
			route("198.19.0.0/16", "0.0.0.0"),        // on the link
			route("0.0.0.0/0", "198.18.180.254"),
			route("198.18.200.9/32", "198.18.180.2"),
		))...), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{
		Addr: netip.MustParsePrefix("198.18.180.101/24"), Router: serverA, ServerID: serverA,
		DNS: []netip.Addr{netip.MustParseAddr("198.18.180.53"), netip.MustParseAddr("198.18.180.54")},
		Routes: []Route{
			{netip.MustParsePrefix("198.18.190.0/24"), serverA},
			{netip.MustParsePrefix("198.19.0.0/16"), netip.IPv4Unspecified()},
			{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParseAddr("198.18.180.254")},
			{netip.MustParsePrefix("198.18.200.9/32"), netip.MustParseAddr("198.18.180.2")},
		},
		LeaseTime: 2 * time.Minute, T1: time.Minute, T2: 105 * time.Second, Acquired: t0,
	}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("lease\n%+v\nwant\n%+v", l, want)
	}
	if gw := l.Gateway(); gw != netip.MustParseAddr("198.18.180.254") {
		t.Errorf("Gateway %s: with option 121 the default route's gateway, not option 3", gw)
	}

	for _, tc := range []struct {
		name    string
		opts    []dhcpv4.Option
		check   func(Lease) bool
		wantErr string
	}{
		{"T1 and T2 from options 58, 59", append(base, dhcpv4.OptRenewTimeValue(10*time.Second), dhcpv4.OptRebindingTimeValue(20*time.Second)),
			func(l Lease) bool { return l.T1 == 10*time.Second && l.T2 == 20*time.Second }, ""},
		{"T1 after T2 is T2", append(base, dhcpv4.OptRenewTimeValue(100*time.Second), dhcpv4.OptRebindingTimeValue(50*time.Second)),
			func(l Lease) bool { return l.T1 == 50*time.Second && l.T2 == 50*time.Second }, ""},
		{"T2 past the lease time is ignored", append(base, dhcpv4.OptRebindingTimeValue(time.Hour)),
			func(l Lease) bool { return l.T2 == 105*time.Second }, ""},
		{"lease forever", []dhcpv4.Option{dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptGeneric(dhcpv4.OptionIPAddressLeaseTime, []byte{255, 255, 255, 255})},
			func(l Lease) bool { return l.LeaseTime == Infinite && l.T1 == Infinite && l.T2 == Infinite }, ""},
		{"no mask: the class's", base, func(l Lease) bool { return l.Addr.Bits() == 24 }, ""},
		{"routes without a default: no gateway", append(base, dhcpv4.OptRouter(serverA.AsSlice()), dhcpv4.OptClasslessStaticRoute(route("198.18.190.0/24", "198.18.180.1"))),
			func(l Lease) bool { return !l.Gateway().IsValid() && l.Router == serverA }, ""},
		{"router only", append(base, dhcpv4.OptRouter(serverA.AsSlice())), func(l Lease) bool { return l.Gateway() == serverA }, ""},
		{"malformed option 121 is ignored", append(base, dhcpv4.OptGeneric(dhcpv4.OptionClasslessStaticRoute, []byte{33, 1, 2, 3, 4, 5, 6, 7, 8})),
			func(l Lease) bool { return l.Routes == nil }, ""},
		{"truncated option 121 is ignored", append(base, dhcpv4.OptGeneric(dhcpv4.OptionClasslessStaticRoute, []byte{24, 198, 18})),
			func(l Lease) bool { return l.Routes == nil }, ""},
		{"non-contiguous mask", append(base, dhcpv4.OptGeneric(dhcpv4.OptionSubnetMask, []byte{255, 0, 255, 0})), nil, "invalid subnet mask"},
		{"no server identifier", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(time.Minute)}, nil, "no server identifier"},
		{"no lease time", []dhcpv4.Option{dhcpv4.OptServerIdentifier(serverA.AsSlice())}, nil, "no lease time"},
	} {
		l, err := leaseFromACK(ack(t, tc.opts...), t0)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr == "" && !tc.check(l):
			t.Errorf("%s: unexpected lease %+v", tc.name, l)
		}
	}
	t.Run("no address", func(t *testing.T) {
		m := ack(t, base...)
		m.YourIPAddr = net.IPv4zero
		if _, err := leaseFromACK(m, t0); err == nil || !strings.Contains(err.Error(), "no usable address") {
			t.Fatalf("%v, want an error saying no usable address", err)
		}
	})
}

func TestKeep(t *testing.T) {
	old := Lease{Addr: netip.MustParsePrefix("198.18.180.101/23"), Router: serverA, DNS: []netip.Addr{serverA},
		Routes: []Route{{netip.MustParsePrefix("198.18.190.0/24"), serverA}}}
	bare := ack(t, dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptIPAddressLeaseTime(time.Minute))
	n, err := leaseFromACK(bare, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := keep(n, old, bare)
	if got.Addr != old.Addr || got.Router != old.Router || !reflect.DeepEqual(got.DNS, old.DNS) || !reflect.DeepEqual(got.Routes, old.Routes) {
		t.Fatalf("a bare renewal ACK lost the old values: %+v", got)
	}
	full := ack(t, dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptIPAddressLeaseTime(time.Minute),
		dhcpv4.OptSubnetMask(net.CIDRMask(24, 32)), dhcpv4.OptRouter(net.ParseIP("198.18.180.2")))
	n, _ = leaseFromACK(full, time.Now())
	if got := keep(n, old, full); got.Addr.Bits() != 24 || got.Router != netip.MustParseAddr("198.18.180.2") {
		t.Fatalf("a renewal ACK's own values were not taken: %+v", got)
	}
}
