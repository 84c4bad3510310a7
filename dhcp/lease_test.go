package dhcp

import (
	"cmp"
	"errors"
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

// What a container's kernel would refuse is dropped from the lease, with
// a warning each; what no endpoint may use is refused.
func TestLeaseSpecialValues(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := []dhcpv4.Option{dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptIPAddressLeaseTime(2 * time.Minute), dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))}
	with := func(opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
		return ack(t, append(append([]dhcpv4.Option{}, base...), opts...)...)
	}
	ip := func(s string) net.IP { return net.ParseIP(s) }
	l, err := leaseFromACK(with(dhcpv4.OptClasslessStaticRoute(
		route("198.18.180.0/24", "198.18.180.1"), // the connected subnet
		route("198.18.190.0/24", "198.18.180.1"),
		route("198.18.190.0/24", "198.18.180.2"), // a second route to it
		route("198.18.191.0/24", "198.18.180.255"),
		route("198.18.192.0/24", "198.18.180.101"), // via the leased address
		route("0.0.0.0/0", "198.18.180.1"),
	)), t0)
	want := []Route{{netip.MustParsePrefix("198.18.190.0/24"), serverA}, {netip.MustParsePrefix("0.0.0.0/0"), serverA}}
	if err != nil || !reflect.DeepEqual(l.Routes, want) || len(l.Warnings) != 4 || l.Gateway() != serverA {
		t.Fatalf("routes %v warnings %q (%v): want %v, 4 warnings, gateway %s", l.Routes, l.Warnings, err, want, serverA)
	}
	for i, w := range []string{"198.18.180.0/24 via 198.18.180.1 (option 121): the connected subnet", "198.18.190.0/24 via 198.18.180.2 (option 121): a second route",
		"via the broadcast address of its subnet 198.18.180.0/24", "via the leased address itself"} {
		if !strings.Contains(l.Warnings[i], w) {
			t.Errorf("warning %q does not say %q", l.Warnings[i], w)
		}
	}
	for _, tc := range []struct {
		router, want, warn string
	}{
		{"198.18.180.255", "", "dropped router 198.18.180.255 (option 3): it is the broadcast address of its subnet 198.18.180.0/24"},
		{"198.18.180.0", "", "it is the network address"},
		{"198.18.180.101", "", "it is the leased address itself"},
		{"127.0.0.1", "", "loopback"},
		{"198.18.180.254", "198.18.180.254", ""},
	} {
		l, err := leaseFromACK(with(dhcpv4.OptRouter(ip(tc.router))), t0)
		if err != nil || l.Gateway().String() != cmp.Or(tc.want, "invalid IP") || (tc.warn != "" && (len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], tc.warn))) {
			t.Errorf("router %s: gateway %s warnings %q (%v); want %q and a warning saying %q", tc.router, l.Gateway(), l.Warnings, err, tc.want, tc.warn)
		}
	}
	if l, _ := leaseFromACK(with(dhcpv4.OptRouter(ip("198.18.180.255"), ip("198.18.180.254"))), t0); l.Router != netip.MustParseAddr("198.18.180.254") {
		t.Errorf("routers .255 and .254: router %s, want the first usable one, .254", l.Router)
	}
	for _, tc := range []struct {
		name, yiaddr string
		opts         []dhcpv4.Option
		wantErr      string
		bad          bool
	}{
		{"mask /7", "10.1.2.3", []dhcpv4.Option{dhcpv4.OptSubnetMask(net.CIDRMask(7, 32))}, "is /7 (option 1): masks below /8 are refused", false},
		{"mask /0", "10.1.2.3", []dhcpv4.Option{dhcpv4.OptSubnetMask(net.CIDRMask(0, 32))}, "is /0 (option 1)", false},
		{"mask /8", "10.1.2.3", []dhcpv4.Option{dhcpv4.OptSubnetMask(net.CIDRMask(8, 32))}, "", false},
		{"/31: both addresses usable", "198.18.180.100", []dhcpv4.Option{dhcpv4.OptSubnetMask(net.CIDRMask(31, 32))}, "", false},
		{"/32", "198.18.180.100", []dhcpv4.Option{dhcpv4.OptSubnetMask(net.CIDRMask(32, 32))}, "", false},
		{"network address", "198.18.180.0", nil, "198.18.180.0 is the network address of its subnet 198.18.180.0/24", true},
		{"broadcast address", "198.18.180.255", nil, "is the broadcast address", true},
		{"server's own", "198.18.180.1", nil, "the server's own address", true},
		{"loopback", "127.0.0.1", nil, "loopback", true},
		{"0/8", "0.0.0.1", nil, "0.0.0.0/8", true},
		{"class E", "240.0.0.1", nil, "240.0.0.0/4", true},
		{"broadcast", "255.255.255.255", nil, "240.0.0.0/4", true},
		{"link-local", "169.254.3.4", nil, "link-local", true},
		{"multicast", "224.0.0.1", nil, "multicast", true},
		{"lease 0 s", "198.18.180.100", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(0)}, "is for 0s (option 51), under the 10s", false},
		{"lease 9 s", "198.18.180.100", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(9 * time.Second)}, "is for 9s", false},
		{"lease 10 s", "198.18.180.100", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(10 * time.Second)}, "", false},
	} {
		m := with()
		for _, o := range tc.opts {
			m.UpdateOption(o)
		}
		m.YourIPAddr = ip(tc.yiaddr)
		_, err := leaseFromACK(m, t0)
		var bad *badAddress
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.As(err, &bad) != tc.bad):
			t.Errorf("%s: %v, want an error saying %q (an address to decline: %v)", tc.name, err, tc.wantErr, tc.bad)
		}
		if a, _ := addr4(m.YourIPAddr); tc.wantErr != "" && errors.As(err, &bad) != (checkOffer(m, a, serverA) != nil && tc.bad) {
			t.Errorf("%s: checkOffer disagrees with leaseFromACK on the address", tc.name)
		}
	}
	// T1 and T2 of 0 (or at the expiry) count as the defaults.
	for _, times := range [][2]time.Duration{{0, 0}, {2 * time.Minute, 2 * time.Minute}, {0, time.Minute}} {
		l, err := leaseFromACK(with(dhcpv4.OptRenewTimeValue(times[0]), dhcpv4.OptRebindingTimeValue(times[1])), t0)
		wantT2 := 105 * time.Second
		if times[1] == time.Minute {
			wantT2 = time.Minute
		}
		if err != nil || l.T1 != time.Minute || l.T2 != wantT2 {
			t.Errorf("T1 %s T2 %s sent: got T1 %s T2 %s (%v), want 1m0s and %s", times[0], times[1], l.T1, l.T2, err, wantT2)
		}
	}
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
