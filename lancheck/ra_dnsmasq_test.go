package lancheck

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestRoutersDnsmasq solicits dnsmasq's router advertisements over a
// real packet socket on a veth in a test namespace: a DHCPv6 range that
// is also advertised for SLAAC (M, O and A set). The parent's kernel
// sends no solicitation of its own, so the one dnsmasq logs is Routers'
// (from ::, so without a MAC). It runs as root, in CI too.
func TestRoutersDnsmasq(t *testing.T) {
	itest.RequireRoot(t)
	near := itest.NewNetns(t)
	near.Sysctl("net.ipv6.conf.default.router_solicitations", "0")
	lan := itest.NewLAN6(t, near, "lan6", netip.MustParsePrefix("2001:db8:61::1/64"))
	d := lan.ServeDHCPv6("2001:db8:61::100,2001:db8:61::1ff,slaac,64,2m")
	rtr := lan.Far.MustLink(itest.LAN6ServerLink).Attrs().HardwareAddr
	mac := net.HardwareAddr{0x02, 0x42, 0x61, 0, 0, 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	routers, err := Routers(ctx, near.Handle(), lan.Parent, mac)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("routers in %s: %v", time.Since(start).Round(time.Millisecond), routers)
	if len(routers) != 1 {
		t.Fatalf("routers %v, want dnsmasq's", routers)
	}
	r := routers[0]
	var pio RAPrefix
	for _, p := range r.Prefixes {
		if p.Prefix == netip.MustParsePrefix("2001:db8:61::/64") {
			pio = p
		}
	}
	if r.MAC.String() != rtr.String() || !r.Source.IsLinkLocalUnicast() || !r.Managed || !r.Other || r.Lifetime <= 0 || r.MTU != 1500 ||
		!pio.OnLink || !pio.Autonomous || pio.Valid <= 0 || pio.Preferred <= 0 {
		t.Fatalf("router %v: want from %s, M and O set, a router lifetime, MTU 1500, and prefix 2001:db8:61::/64 on-link and autonomous with lifetimes", r, rtr)
	}
	// dnsmasq logs each solicitation: ours, from :: (no MAC), and no
	// other.
	solicited := func() (ours, others int) {
		for _, line := range strings.Split(d.Log(), "\n") {
			if _, after, ok := strings.Cut(line, "RTR-SOLICIT("+itest.LAN6ServerLink+")"); ok {
				if strings.TrimSpace(after) == "" {
					ours++
				} else {
					others++
				}
			}
		}
		return ours, others
	}
	if !itest.WaitFor(2*time.Second, func() bool { ours, _ := solicited(); return ours > 0 }) {
		t.Fatalf("dnsmasq logged no solicitation from :: (without a MAC):\n%s", d.Log())
	}
	if ours, others := solicited(); ours > maxSolicitations || others > 0 {
		t.Errorf("dnsmasq logged %d solicitations without a MAC (at most %d) and %d with one (want none):\n%s", ours, maxSolicitations, others, d.Log())
	}
}
