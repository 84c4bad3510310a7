package dhcp

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// secondDnsmasqLink is a second server's link on the test LAN: a macvlan
// on srv0, in a namespace of its own.
const secondDnsmasqLink = "srv1"

// TestOffersDnsmasq: two real dnsmasq servers on one LAN both answer
// Offers' DISCOVER, and neither holds a lease afterwards (nothing was
// REQUESTed). It runs as root, in CI too.
func TestOffersDnsmasq(t *testing.T) {
	l := newLAN(t)
	other := itest.NewNetns(t)
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: secondDnsmasqLink, ParentIndex: l.far.LinkIndex(lanServer)}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := l.far.NL.LinkAdd(mv); err != nil {
		t.Fatalf("add macvlan %s on %s: %v", secondDnsmasqLink, lanServer, err)
	}
	if err := l.far.NL.LinkSetNsFd(l.far.MustLink(secondDnsmasqLink), int(other.Handle())); err != nil {
		t.Fatal(err)
	}
	second := netip.MustParsePrefix("198.18.180.2/24")
	if err := other.NL.AddrAdd(other.MustLink(secondDnsmasqLink), &netlink.Addr{IPNet: &net.IPNet{IP: second.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	other.Up(secondDnsmasqLink)
	serve := func(ns *itest.Netns, link, rng, router string) *itest.Dnsmasq {
		return itest.StartDnsmasq(t, itest.DnsmasqConfig{NS: ns, Interface: link, Dir: t.TempDir(), Range: rng,
			Options: []string{"3," + router}, Extra: []string{"--no-ping"}})
	}
	d1 := serve(l.far, lanServer, "198.18.180.100,198.18.180.150,255.255.255.0,2m", "198.18.180.1")
	d2 := serve(other, secondDnsmasqLink, "198.18.180.200,198.18.180.250,255.255.255.0,3m", "198.18.180.2")

	c := l.client()
	r := Request{Parent: lanParent, MAC: mac(1), Hostname: "probe"}
	start := time.Now()
	offers, err := c.Offers(ctxFor(t, time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("offers in %s: %v", time.Since(start).Round(time.Millisecond), offers)
	srvMAC := func(ns *itest.Netns, link string) string { return ns.MustLink(link).Attrs().HardwareAddr.String() }
	in := func(p netip.Prefix, lo, hi string) bool {
		return p.Bits() == 24 && !p.Addr().Less(netip.MustParseAddr(lo)) && !netip.MustParseAddr(hi).Less(p.Addr())
	}
	byServer := map[netip.Addr]Offer{}
	for _, o := range offers {
		byServer[o.Server] = o
	}
	o1, o2 := byServer[serverAddr.Addr()], byServer[second.Addr()]
	if len(offers) != 2 ||
		o1.ServerMAC.String() != srvMAC(l.far, lanServer) || !in(o1.Addr, "198.18.180.100", "198.18.180.150") || o1.Router != serverAddr.Addr() || o1.LeaseTime != 2*time.Minute ||
		o2.ServerMAC.String() != srvMAC(other, secondDnsmasqLink) || !in(o2.Addr, "198.18.180.200", "198.18.180.250") || o2.Router != second.Addr() || o2.LeaseTime != 3*time.Minute {
		t.Fatalf("offers %v: want one of each server (%s at %s, %s at %s) of its range, router and lease time",
			offers, serverAddr.Addr(), srvMAC(l.far, lanServer), second.Addr(), srvMAC(other, secondDnsmasqLink))
	}
	// Both logged the DISCOVER and their OFFER; neither saw a REQUEST or
	// writes a lease, within a second of Offers' end.
	for _, d := range []*itest.Dnsmasq{d1, d2} {
		if !itest.WaitFor(2*time.Second, func() bool {
			return strings.Contains(d.Log(), "DHCPDISCOVER(") && strings.Contains(d.Log(), "DHCPOFFER(")
		}) {
			t.Fatalf("dnsmasq logged no DHCPDISCOVER and DHCPOFFER:\n%s", d.Log())
		}
	}
	if itest.WaitFor(time.Second, func() bool {
		return len(d1.Leases())+len(d2.Leases()) > 0 || strings.Contains(d1.Log()+d2.Log(), "DHCPREQUEST(")
	}) {
		t.Fatalf("a lease or a REQUEST after Offers: lease files %v and %v", d1.Leases(), d2.Leases())
	}
}
