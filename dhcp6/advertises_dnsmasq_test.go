package dhcp6

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAdvertisesDnsmasq: two real dnsmasq DHCPv6 servers on one LAN (the
// second on a macvlan of the first's link, in a namespace of its own)
// both answer Advertises' Solicit, and neither binds an address (nothing
// was Requested). It runs as root, in CI too.
func TestAdvertisesDnsmasq(t *testing.T) {
	itest.RequireRoot(t)
	near := itest.NewNetns(t)
	lan := itest.NewLAN6(t, near, "lan6", netip.MustParsePrefix("2001:db8:60::1/64"))
	d1 := lan.ServeDHCPv6("2001:db8:60::100,2001:db8:60::1ff,64,2m", "--dhcp-duid=32473,01:01")

	const link2 = "rtr6b"
	other := itest.NewNetns(t)
	other.Sysctl("net.ipv6.conf.default.accept_dad", "0")
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: link2, ParentIndex: lan.Far.LinkIndex(itest.LAN6ServerLink)}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := lan.Far.NL.LinkAdd(mv); err != nil {
		t.Fatalf("add macvlan %s on %s: %v", link2, itest.LAN6ServerLink, err)
	}
	if err := lan.Far.NL.LinkSetNsFd(lan.Far.MustLink(link2), int(other.Handle())); err != nil {
		t.Fatal(err)
	}
	l2 := other.MustLink(link2)
	if err := other.NL.AddrAdd(l2, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8:60::2"), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	other.Up(link2)
	if !itest.WaitFor(5*time.Second, func() bool {
		addrs, _ := other.NL.AddrList(l2, unix.AF_INET6)
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s has no usable link-local address within 5s", link2)
	}
	d2 := itest.StartDnsmasq(t, itest.DnsmasqConfig{NS: other, Interface: link2, Dir: t.TempDir(),
		Range: "2001:db8:60::200,2001:db8:60::2ff,64,2m", Extra: []string{"--dhcp-duid=32473,02:02"}, Ready: "DHCPv6, IP range"})

	mac := net.HardwareAddr{0x02, 0x42, 0x60, 0x00, 0x00, 0x07}
	r := Request{Parent: lan.Parent, MAC: mac, DUID: DUIDFromMAC(mac), IAID: EndpointIAID("ep-lancheck")}
	start := time.Now()
	advs, err := New(WithNetns(near.Handle())).Advertises(ctxFor(t, time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("advertisements in %s: %v", time.Since(start).Round(time.Millisecond), advs)
	duid := func(id byte) []byte { return []byte{0, 2, 0, 0, 0x7e, 0xd9, id, id} } // DUID-EN 32473
	in := func(a Advertisement, lo, hi string) bool {
		return len(a.Addrs) == 1 && !a.Addrs[0].Less(netip.MustParseAddr(lo)) && !netip.MustParseAddr(hi).Less(a.Addrs[0])
	}
	var a1, a2 Advertisement
	for _, a := range advs {
		switch {
		case bytes.Equal(a.ServerID, duid(1)):
			a1 = a
		case bytes.Equal(a.ServerID, duid(2)):
			a2 = a
		}
	}
	ll := func(ns *itest.Netns, link string) netip.Addr {
		return LinkLocal(ns.MustLink(link).Attrs().HardwareAddr)
	}
	if len(advs) != 2 ||
		!in(a1, "2001:db8:60::100", "2001:db8:60::1ff") || a1.ServerMAC.String() != lan.Far.MustLink(itest.LAN6ServerLink).Attrs().HardwareAddr.String() || a1.Source != ll(lan.Far, itest.LAN6ServerLink) ||
		!in(a2, "2001:db8:60::200", "2001:db8:60::2ff") || a2.ServerMAC.String() != l2.Attrs().HardwareAddr.String() || a2.Source != ll(other, link2) {
		t.Fatalf("advertisements %v: want one of each server (DUIDs %x and %x), from its link, of its range", advs, duid(1), duid(2))
	}
	for _, d := range []*itest.Dnsmasq{d1.Dnsmasq, d2} {
		if !itest.WaitFor(2*time.Second, func() bool {
			return strings.Contains(d.Log(), "DHCPSOLICIT(") && strings.Contains(d.Log(), "DHCPADVERTISE(")
		}) {
			t.Fatalf("dnsmasq logged no DHCPSOLICIT and DHCPADVERTISE:\n%s", d.Log())
		}
	}
	second := &itest.Dnsmasq6{Dnsmasq: d2}
	if itest.WaitFor(time.Second, func() bool {
		return len(d1.Leases6())+len(second.Leases6()) > 0 || strings.Contains(d1.Log()+d2.Log(), "DHCPREQUEST(")
	}) {
		t.Fatalf("a lease or a Request after Advertises: lease files %v and %v", d1.Leases6(), second.Leases6())
	}
}
