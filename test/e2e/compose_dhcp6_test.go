//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestComposeDHCPv6: a dual-stack compose network whose IPv4 and IPv6
// come from the LAN's DHCP and DHCPv6 servers through underlay's IPAM
// (options dhcp and dhcpv6). On the current engine the container gets the
// MAC of its name for both leases: dnsmasq holds the IPv4 lease for that
// MAC and the IPv6 one for its DUID-LL under the name, the container's
// eth0 has the IPv6 address Docker shows, its DNS resolves the name to
// it, `up --force-recreate` keeps both, `down` leaves no lease. 20.10
// sends no name, so the two leases have two random MACs and an endpoint
// has one: `up` is refused saying so.
func TestComposeDHCPv6(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	start := time.Now()
	const router4, router6 = "198.18.183.1", "2001:db8:67::1"
	l := e.makeIPv6LAN(t, itest.DnsmasqConfig{Range: "198.18.183.100,198.18.183.150,255.255.255.0,2m", Options: []string{"3," + router4},
		Extra: []string{"--dhcp-range=2001:db8:67::100,2001:db8:67::1ff,64,2m", "--no-ping"}, Ready: "DHCPv6, IP range", DNS: true},
		router6+"/64", router4+"/24")
	const project, name = "udhcp6", "web6"
	netName := composeNetwork(project, "lan")
	file := e.composeProject(t, project, fmt.Sprintf(`services:
  web6:
    image: %[1]s
    container_name: %[2]s
    command: ["sleep", "86400"]
    stop_grace_period: 1s
    networks:
      - lan
networks:
  lan:
    driver: %[3]s
    enable_ipv6: true
    driver_opts:
      parent: %[4]s
    ipam:
      driver: %[3]s
      config:
        - subnet: 198.18.183.0/24
          gateway: %[5]s
        - subnet: 2001:db8:67::/64
          gateway: %[6]s
      options:
        parent: %[4]s
        dhcp: "true"
        dhcpv6: "true"
`, imageTag, name, plugin, ipv6Parent, router4, router6))

	if !engine.sendsEndpointName() {
		out, err := e.tryCompose(project, file, "up", "-d")
		if err == nil || !strings.Contains(out, "no container name") || !strings.Contains(out, "one MAC") {
			t.Fatalf("%s sends no endpoint name: compose up of a DHCP and DHCPv6 network answered %v:\n%s\nwant the refusal of two leases with two random MACs", engine, err, out)
		}
		t.Logf("%s: refused as it should: %s", engine, out)
		e.compose(t, project, file, "down", "-t", "1")
		eventually(t, leaseWait, "no lease left", func() error {
			if ls := l.d.Leases6(); len(ls) > 0 || len(l.d.Leases()) > 0 {
				return fmt.Errorf("leases left: %v %v", l.d.Leases(), ls)
			}
			return nil
		})
		return
	}
	mac := e.underlayMAC(t, ipv6Parent, name)
	var was4, was6 netip.Addr
	check := func(phase string) {
		t.Helper()
		c := e.inspect6(t, name, netName)
		a4, err4 := netip.ParseAddr(c.IPAddress)
		a6, err6 := netip.ParseAddr(c.GlobalIPv6Address)
		if err4 != nil || err6 != nil || c.MacAddress != mac || c.GlobalIPv6PrefixLen != 64 {
			t.Fatalf("%s: docker inspect %+v; want the MAC of %s (%s), an IPv4 and an IPv6 address /64", phase, c, name, mac)
		}
		if was4.IsValid() && (a4 != was4 || a6 != was6) {
			t.Fatalf("%s: %s and %s, want %s and %s as before", phase, a4, a6, was4, was6)
		}
		if l4, ok := l.d.WaitLease(leaseWait, a4, func(x itest.DnsmasqLease) bool { return x.MAC == mac && x.Hostname == name }); !ok {
			t.Fatalf("%s: dnsmasq's IPv4 lease of %s: %q, want MAC %s and host name %s", phase, a4, l4.Line, mac, name)
		}
		if l6, ok := l.d.WaitLease6(leaseWait, a6, func(x itest.Dnsmasq6Lease) bool { return x.DUID == duidLL(c.mac) && x.Hostname == name }); !ok {
			t.Fatalf("%s: dnsmasq's IPv6 lease of %s: %q, want DUID %s and host name %s", phase, a6, l6.Line, duidLL(c.mac), name)
		}
		e.wantAddr6(t, name, netip.PrefixFrom(a6, 64), 30*time.Second)
		eventually(t, 15*time.Second, "the LAN's DNS resolves "+name+" to "+a6.String(), func() error {
			out, _ := e.exec(name, "nslookup", name, router4)
			if !strings.Contains(out, a6.String()) || !strings.Contains(out, a4.String()) {
				return fmt.Errorf("nslookup %s %s:\n%s", name, router4, out)
			}
			return nil
		})
		t.Logf("%s: %s: %s and %s, MAC %s", phase, name, a4, a6, mac)
		was4, was6 = a4, a6
	}
	e.compose(t, project, file, "up", "-d")
	check("up")
	e.compose(t, project, file, "up", "-d", "--force-recreate")
	check("up --force-recreate")
	e.compose(t, project, file, "down", "-t", "1")
	e.networkGone(t, netName)
	eventually(t, leaseWait, "no lease left after down", func() error {
		if ls := l.d.Leases6(); len(ls) > 0 || len(l.d.Leases()) > 0 {
			return fmt.Errorf("leases left: %v %v", l.d.Leases(), ls)
		}
		return nil
	})
	t.Logf("TestComposeDHCPv6 on %s: %s", engineLabel, time.Since(start).Round(time.Millisecond))
}
