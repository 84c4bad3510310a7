//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// IPv6 from the LAN (issue 26) through a real engine: `docker network
// create -d underlay --ipv6 --ipam-driver null -o parent=IF -o
// ipv6_mode=slaac|dhcpv6` on a LAN of the test's own whose router is
// dnsmasq, sending router advertisements (--enable-ra) and, for dhcpv6,
// serving DHCPv6. The LAN: the veth vip6 in the suite's namespace (the
// parent) and its peer vip6-s in the namespace underlay-e2e-ipv6, which
// forwards (else dnsmasq advertises a router lifetime of 0) and holds the
// router's addresses. Both are found again by their fixed names:
// teardownAll removes them after a killed run (teardownIPv6LAN),
// checkHostUntouched checks they are gone. Each case makes the LAN anew
// with its own prefix: 2001:db8:64::/64 (slaac; 2001:db8:65::/64 the
// prefix added later), 2001:db8:66::/64 (dhcpv6), 2001:db8:67::/64 with
// 198.18.183.0/24 (dhcpv6 with -o dhcp=true: dual stack).
//
// Only engines that create an --ipv6 network with the null IPAM run the
// cases (the current one); 20.10 refuses such a network itself, before
// underlay is asked, and the test checks that refusal there.
const (
	ipv6NS      = nsName + "-ipv6"
	ipv6NSPath  = "/run/netns/" + ipv6NS
	ipv6Parent  = "vip6"
	ipv6SrvLink = "vip6-s"
)

// takesNullIPAMv6: the engine creates --ipv6 networks whose IPAM is the
// null driver (no IPv6 pool: the LAN gives the addresses), seen on the
// current engine; 20.10 refuses them itself. Engines between 20.10 and
// the current one are not run here: the threshold is the one of
// honoursIfname, the newest fact checked.
func (g engineInfo) takesNullIPAMv6() bool { return g.apiAtLeast(1, 52) }

// ipv6Dir holds dnsmasq's lease file, log and pid file.
func ipv6Dir() string { return filepath.Join(dataDir, "ipv6") }

// lan6 is the IPv6 LAN of one case.
type lan6 struct {
	d        *itest.Dnsmasq6
	router   netip.Prefix // the router's global address and the advertised prefix
	routerLL netip.Addr   // the router's link-local address: the containers' default route
}

// makeIPv6LAN creates the LAN with the router's addresses (an IPv6 one
// first) on vip6-s and starts dnsmasq with cfg (Netns, Interface, Dir
// and --enable-ra filled in); both go at cleanup (and with teardownAll
// after a killed run).
func (e *env) makeIPv6LAN(t *testing.T, cfg itest.DnsmasqConfig, addrs ...string) *lan6 {
	t.Helper()
	if err := teardownIPv6LAN(); err != nil {
		t.Fatalf("remove an earlier IPv6 LAN: %v", err)
	}
	t.Cleanup(func() {
		if err := teardownIPv6LAN(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	cmds := [][]string{
		{"netns", "add", ipv6NS},
		{"-n", ipv6NS, "link", "set", "lo", "up"},
		{"-n", nsName, "link", "add", ipv6Parent, "mtu", "1500", "type", "veth", "peer", "name", ipv6SrvLink, "netns", ipv6NS},
		{"-n", nsName, "link", "set", ipv6Parent, "up"},
	}
	for _, a := range addrs {
		c := []string{"-n", ipv6NS, "addr", "add", a, "dev", ipv6SrvLink}
		if strings.Contains(a, ":") {
			c = append(c, "nodad")
		}
		cmds = append(cmds, c)
	}
	if err := ipCmds(append(cmds, []string{"-n", ipv6NS, "link", "set", ipv6SrvLink, "up"})...); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nsenter", "--net="+ipv6NSPath, "--", "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1").CombinedOutput(); err != nil {
		t.Fatalf("forwarding on in %s: %v: %s", ipv6NS, err, out)
	}
	l := &lan6{router: netip.MustParsePrefix(addrs[0])}
	eventually(t, 10*time.Second, ipv6SrvLink+" has a usable link-local address", func() error {
		out, err := exec.Command("ip", "-n", ipv6NS, "-6", "-o", "addr", "show", "dev", ipv6SrvLink, "scope", "link").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if strings.Contains(string(out), "tentative") {
			return fmt.Errorf("tentative: %s", out)
		}
		ps := inet6(string(out))
		if len(ps) != 1 {
			return fmt.Errorf("link-local addresses %v", ps)
		}
		l.routerLL = ps[0].Addr()
		return nil
	})
	if err := os.MkdirAll(ipv6Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Netns, cfg.Interface, cfg.Dir = ipv6NSPath, ipv6SrvLink, ipv6Dir()
	// An RA every 4 s: a container's interface comes up between two of
	// them, and the prefix added later is advertised soon; the router
	// lifetime is given (1800 s) rather than left to dnsmasq's default
	// for so short an interval. (busybox's `ip -6 route` shows every
	// default route as "expires 0sec", whatever its lifetime.)
	cfg.Extra = append([]string{"--enable-ra", "--ra-param=" + ipv6SrvLink + ",4,1800"}, cfg.Extra...)
	l.d = &itest.Dnsmasq6{Dnsmasq: itest.StartDnsmasq(t, cfg)}
	return l
}

// teardownIPv6LAN kills every process in the IPv6 LAN's namespace
// (dnsmasq), deletes the LAN's veth and the namespace, and removes
// dnsmasq's files. Nothing of it is in the host's namespace.
func teardownIPv6LAN() error { return teardownLAN(ipv6NS, ipv6NSPath, ipv6Parent, ipv6Dir()) }

// ipv6LANLeft reports what is left of the IPv6 LAN after cleanup.
func ipv6LANLeft() error { return lanLeft(ipv6NS, ipv6NSPath) }

// inet6 parses the inet6 addresses of `ip -6 addr` output (iproute2's or
// busybox's).
func inet6(out string) []netip.Prefix {
	var ps []netip.Prefix
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "inet6" {
			if p, err := netip.ParsePrefix(f[i+1]); err == nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// eui64 is the address the kernel forms in prefix from mac (EUI-64).
func eui64(prefix netip.Prefix, mac net.HardwareAddr) netip.Addr {
	b := prefix.Masked().Addr().As16()
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// duidLL is the DUID-LL of a MAC as dnsmasq's lease file shows it: type 3,
// hardware type 1 (Ethernet), the MAC.
func duidLL(mac net.HardwareAddr) string {
	return itest.HexColons(append([]byte{0, 3, 0, 1}, mac...))
}

// ctr6 is a container of an IPv6 LAN network as docker inspect shows it.
type ctr6 struct {
	MacAddress, IPAddress, GlobalIPv6Address, IPv6Gateway string
	IPPrefixLen, GlobalIPv6PrefixLen                      int
	mac                                                   net.HardwareAddr
}

// inspect6 reads a container's settings on a network from docker inspect.
func (e *env) inspect6(t *testing.T, name, netName string) ctr6 {
	t.Helper()
	var nets map[string]ctr6
	if err := e.jsonOut(&nets, "inspect", "-f", "{{json .NetworkSettings.Networks}}", name); err != nil {
		t.Fatal(err)
	}
	c, ok := nets[netName]
	mac, err := net.ParseMAC(c.MacAddress)
	if !ok || err != nil || len(mac) != 6 {
		t.Fatalf("docker inspect %s: %+v: want a MAC on %s", name, nets, netName)
	}
	c.mac = mac
	return c
}

// addrs6 lists a container's IPv6 addresses on eth0 of a scope (global,
// link).
func (e *env) addrs6(c, scope string) ([]netip.Prefix, string, error) {
	out, err := e.exec(c, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", scope)
	return inet6(out), out, err
}

// wantAddr6 waits until container c has addr/bits on eth0 (scope global),
// and not tentative any more.
func (e *env) wantAddr6(t *testing.T, c string, want netip.Prefix, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var last string
	within(t, timeout, c+" has "+want.String()+" on eth0", func() error {
		ps, out, err := e.addrs6(c, "global")
		last = out
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			for _, p := range inet6(line) {
				if p == want && !strings.Contains(line, "tentative") {
					return nil
				}
			}
		}
		return fmt.Errorf("global addresses %v", ps)
	}, func() {
		all, _ := e.exec(c, "ip", "-6", "addr")
		rt, _ := e.exec(c, "ip", "-6", "route")
		sys, _ := e.exec(c, "sh", "-c", "cd /proc/sys/net/ipv6/conf/eth0 && for f in disable_ipv6 accept_ra forwarding autoconf addr_gen_mode; do echo $f=$(cat $f); done")
		t.Logf("%s: ip -6 addr:\n%s\nip -6 route:\n%s\n%s", c, all, rt, sys)
	})
	t.Logf("%s: %s on eth0 after %s: %s", c, want, time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(last))
}

// wantDefault6 waits until container c's default route is via the
// router's link-local address on eth0 (from the router advertisements).
func (e *env) wantDefault6(t *testing.T, c string, l *lan6) {
	t.Helper()
	want := "default via " + l.routerLL.String() + " dev eth0"
	var out string
	eventually(t, 30*time.Second, c+": "+want, func() error {
		var err error
		if out, err = e.exec(c, "ip", "-6", "route", "show", "default"); err != nil {
			return err
		}
		if !strings.Contains(out, want) {
			return fmt.Errorf("ip -6 route show default: %q", out)
		}
		return nil
	})
	t.Logf("%s: %s", c, out)
}

// TestIPv6LAN: on engines that take --ipv6 with the null IPAM, a
// container of an ipv6_mode=slaac network forms its global address from
// the router's advertised prefix and its MAC (EUI-64), takes its default
// route via the router's link-local address, reaches the router, and
// follows a prefix the router adds; a container of an ipv6_mode=dhcpv6
// network has the address dnsmasq leased to the DUID-LL of its MAC
// (docker inspect shows it, /128), reaches the router, and docker rm -f
// releases the lease; with -o dhcp=true as well it is dual stack, both
// leases from dnsmasq. On 20.10 the engine refuses the network itself.
func TestIPv6LAN(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	e.wantNoLeak(t, "before the test")
	t.Run("slaac-docker-ipam", e.testSLAACDockerIPAM)
	if !engine.takesNullIPAMv6() {
		t.Logf("%s refuses --ipv6 --ipam-driver null itself: ipv6_mode=slaac and dhcpv6 run on the current engine only", engine)
		if err := ipCmds([]string{"-n", nsName, "link", "add", ipv6Parent, "type", "veth", "peer", "name", ipv6Parent + "-p"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = teardownIPv6LAN() })
		for _, mode := range []string{"slaac", "dhcpv6"} {
			out, err := e.docker("network", "create", "-d", plugin, "--ipv6", "--ipam-driver", "null",
				"-o", "parent="+ipv6Parent, "-o", "ipv6_mode="+mode, "n12r")
			if err == nil {
				e.removeNetwork(t, "n12r")
				t.Fatalf("%s: --ipv6 --ipam-driver null -o ipv6_mode=%s was created; want the engine's refusal", engine, mode)
			}
			t.Logf("ipv6_mode=%s refused: %s", mode, out)
			if !strings.Contains(out, "Error response from daemon: ") || strings.Contains(out, "NetworkDriver.") {
				t.Errorf("%s: ipv6_mode=%s refused with %q; want the engine's own refusal (not underlay's)", engine, mode, out)
			}
			if !strings.Contains(out, null6Refusal) {
				t.Errorf("%s: ipv6_mode=%s refused with %q; want it to say %q", engine, mode, out, null6Refusal)
			}
			if _, err := e.docker("network", "inspect", "n12r"); err == nil {
				t.Errorf("refused network n12r exists")
			}
		}
		// The form without --ipv6 (IPv4 from Docker's IPAM): underlay refuses
		// it here, where the engine would disable IPv6 in the container.
		out, err := e.docker("network", "create", "-d", plugin, "--subnet", "198.18.187.0/24", "-o", "parent="+ipv6Parent, "-o", "ipv6_mode=dhcpv6", "n12r")
		if err == nil {
			e.removeNetwork(t, "n12r")
			t.Fatalf("%s: ipv6_mode=dhcpv6 without --ipv6 was created; want underlay's refusal", engine)
		}
		t.Logf("ipv6_mode=dhcpv6 without --ipv6 refused: %s", out)
		if !strings.Contains(out, "NetworkDriver.CreateNetwork") || !strings.Contains(out, "com.docker.network.enable_ipv4") || !strings.Contains(out, "--ipv6 --subnet V4 --subnet V6 -o ipv6_mode=slaac") {
			t.Errorf("%s: refused with %q; want underlay's refusal naming the engine's missing label and the form that works", engine, out)
		}
		if err := teardownIPv6LAN(); err != nil {
			t.Fatal(err)
		}
		e.wantNoLeak(t, "after the test")
		return
	}
	t.Run("slaac", e.testSLAAC)
	t.Run("dhcpv6", func(t *testing.T) { e.testDHCPv6(t, "dhcpv6") })
	t.Run("dualstack", func(t *testing.T) { e.testDHCPv6(t, "dual stack") })
	t.Run("dhcpv6-docker-ipv4", func(t *testing.T) { e.testDHCPv6(t, "docker's IPv4") })
	e.wantNoLeak(t, "after the test")
}

// null6Refusal is what 20.10 says to --ipv6 --ipam-driver null, before
// any request reaches the plugin ("pool pool" is the engine's).
const null6Refusal = "null ipam driver does not handle IPv6 address pool pool requests"

// testSLAAC: ipv6_mode=slaac on 2001:db8:64::/64, then 2001:db8:65::/64
// added on the router.
func (e *env) testSLAAC(t *testing.T) {
	start := time.Now()
	l := e.makeIPv6LAN(t, itest.DnsmasqConfig{Range: "::,constructor:" + ipv6SrvLink + ",ra-only,64,2m",
		Ready: "router advertisement on"}, "2001:db8:64::1/64")
	e.network(t, "n12s", "-d", plugin, "--ipv6", "--ipam-driver", "null", "-o", "parent="+ipv6Parent, "-o", "ipv6_mode=slaac")
	e.run(t, ctr{name: "c12s"}, "n12s")
	c := e.inspect6(t, "c12s", "n12s")
	t.Logf("c12s: docker inspect: MAC %s, IPv4 %q, IPv6 %s/%d gateway %q", c.mac, c.IPAddress, c.GlobalIPv6Address, c.GlobalIPv6PrefixLen, c.IPv6Gateway)
	if dis, err := e.exec("c12s", "cat", "/proc/sys/net/ipv6/conf/eth0/disable_ipv6"); err != nil || dis != "0" {
		t.Fatalf("c12s: eth0's disable_ipv6 is %q (%v); want 0, IPv6 on", dis, err)
	}
	ll := netip.PrefixFrom(eui64(netip.MustParsePrefix("fe80::/64"), c.mac), 64)
	// What underlay answered, which keeps IPv6 on: docker inspect shows
	// it as the "global" address; the LAN's addresses are the kernel's.
	if c.GlobalIPv6Address != ll.Addr().String() || c.GlobalIPv6PrefixLen != 64 {
		t.Errorf("c12s: docker inspect shows IPv6 %s/%d; want %s, the EUI-64 link-local address underlay answers", c.GlobalIPv6Address, c.GlobalIPv6PrefixLen, ll)
	}
	if ps, out, err := e.addrs6("c12s", "link"); err != nil || len(ps) != 1 || ps[0] != ll {
		t.Errorf("c12s: link-local addresses on eth0 %v (%v): %q; want %s alone (EUI-64 of %s, what underlay answered)", ps, err, out, ll, c.mac)
	}
	if out, _ := e.exec("c12s", "ip", "-4", "-o", "addr", "show", "dev", "eth0"); out != "" {
		t.Errorf("c12s: IPv4 on eth0 %q; want none (null IPAM, no dhcp=true)", out)
	}
	e.wantAddr6(t, "c12s", netip.PrefixFrom(eui64(l.router, c.mac), 64), 30*time.Second)
	e.wantDefault6(t, "c12s", l)
	e.ping(t, "c12s", l.router.Addr().String())

	// The router adds a prefix: the container forms an address in it too.
	second := netip.MustParsePrefix("2001:db8:65::1/64")
	if err := ipCmds([]string{"-n", ipv6NS, "addr", "add", second.String(), "dev", ipv6SrvLink, "nodad"}); err != nil {
		t.Fatal(err)
	}
	e.wantAddr6(t, "c12s", netip.PrefixFrom(eui64(second, c.mac), 64), 30*time.Second)
	e.ping(t, "c12s", second.Addr().String())
	if ps, _, _ := e.addrs6("c12s", "global"); len(ps) != 2 {
		t.Errorf("c12s: global addresses %v; want one in each prefix", ps)
	}
	e.must(t, "rm", "-f", "c12s")
	e.must(t, "network", "rm", "n12s")
	l.d.Stop()
	if err := teardownIPv6LAN(); err != nil {
		t.Fatal(err)
	}
	t.Logf("slaac took %s", time.Since(start).Round(100*time.Millisecond))
}

// testSLAACDockerIPAM: ipv6_mode=slaac with Docker's IPAM (`--ipv6
// --subnet V4 --subnet V6`), the form both engines take: the container
// has Docker's addresses of both pools (docker inspect), forms its LAN
// address from the router's advertised prefix 2001:db8:64::/64 beside
// them, takes its default route from the advertisements (underlay's Join
// answers no IPv6 gateway), and reaches the router from the LAN address.
func (e *env) testSLAACDockerIPAM(t *testing.T) {
	start := time.Now()
	l := e.makeIPv6LAN(t, itest.DnsmasqConfig{Range: "::,constructor:" + ipv6SrvLink + ",ra-only,64,2m",
		Ready: "router advertisement on"}, "2001:db8:64::1/64")
	e.network(t, "n12i", "-d", plugin, "--ipv6", "--subnet", "198.18.186.0/24", "--subnet", "2001:db8:6a::/64",
		"-o", "parent="+ipv6Parent, "-o", "ipv6_mode=slaac")
	e.run(t, ctr{name: "c12i"}, "n12i")
	c := e.inspect6(t, "c12i", "n12i")
	t.Logf("c12i: docker inspect: MAC %s, IPv4 %s/%d, IPv6 %s/%d gateway %q", c.mac, c.IPAddress, c.IPPrefixLen, c.GlobalIPv6Address, c.GlobalIPv6PrefixLen, c.IPv6Gateway)
	v6, err := netip.ParseAddr(c.GlobalIPv6Address)
	if err != nil || !netip.MustParsePrefix("2001:db8:6a::/64").Contains(v6) || c.GlobalIPv6PrefixLen != 64 {
		t.Errorf("c12i: docker inspect shows IPv6 %s/%d; want an address of Docker's pool 2001:db8:6a::/64", c.GlobalIPv6Address, c.GlobalIPv6PrefixLen)
	}
	if v4, err := netip.ParseAddr(c.IPAddress); err != nil || !netip.MustParsePrefix("198.18.186.0/24").Contains(v4) {
		t.Errorf("c12i: docker inspect shows IPv4 %q; want an address of 198.18.186.0/24", c.IPAddress)
	}
	if c.IPv6Gateway != "" {
		t.Errorf("c12i: IPv6 gateway %q; want none (the default route comes from the router's advertisements)", c.IPv6Gateway)
	}
	lanAddr := netip.PrefixFrom(eui64(l.router, c.mac), 64)
	e.wantAddr6(t, "c12i", lanAddr, 30*time.Second)
	e.wantDefault6(t, "c12i", l)
	eventually(t, 30*time.Second, "c12i pings the router from its LAN address", func() error {
		// busybox ping: -I takes a source address
		out, err := e.exec("c12i", "ping", "-c", "1", "-W", "1", "-I", lanAddr.Addr().String(), l.router.Addr().String())
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	e.must(t, "rm", "-f", "c12i")
	e.must(t, "network", "rm", "n12i")
	l.d.Stop()
	if err := teardownIPv6LAN(); err != nil {
		t.Fatal(err)
	}
	t.Logf("slaac with Docker's IPAM took %s", time.Since(start).Round(100*time.Millisecond))
}

// testDHCPv6: ipv6_mode=dhcpv6 on 2001:db8:66::/64, or, dual, with -o
// dhcp=true as well on 2001:db8:67::/64 and 198.18.183.0/24.
func (e *env) testDHCPv6(t *testing.T, kind string) {
	start := time.Now()
	dual, docker4 := kind == "dual stack", kind == "docker's IPv4"
	name, ctrName, router, router4 := "n12d", "c12d", "2001:db8:66::1/64", ""
	cfg := itest.DnsmasqConfig{Range: "2001:db8:66::100,2001:db8:66::1ff,64,2m", Ready: "DHCPv6, IP range"}
	addrs := []string{router}
	args := []string{"-d", plugin, "--ipv6", "--ipam-driver", "null", "-o", "parent=" + ipv6Parent, "-o", "ipv6_mode=dhcpv6"}
	if dual {
		name, ctrName, router, router4 = "n12x", "c12x", "2001:db8:67::1/64", "198.18.183.1"
		cfg = itest.DnsmasqConfig{Range: "198.18.183.100,198.18.183.150,255.255.255.0,2m", Options: []string{"3," + router4},
			Extra: []string{"--dhcp-range=2001:db8:67::100,2001:db8:67::1ff,64,2m", "--no-ping"}, Ready: "DHCPv6, IP range"}
		addrs = []string{router, router4 + "/24"}
		args = append(args, "-o", "dhcp=true")
	}
	if docker4 {
		name, ctrName, router = "n12v", "c12v", "2001:db8:69::1/64"
		cfg = itest.DnsmasqConfig{Range: "2001:db8:69::100,2001:db8:69::1ff,64,2m", Ready: "DHCPv6, IP range"}
		addrs = []string{router}
		args = []string{"-d", plugin, "--subnet", "198.18.187.0/24", "-o", "parent=" + ipv6Parent, "-o", "ipv6_mode=dhcpv6"}
	}
	l := e.makeIPv6LAN(t, cfg, addrs...)
	lo := l.router.Masked().Addr().As16()
	lo[14], lo[15] = 0x01, 0x00
	hi := lo
	hi[15] = 0xff
	first, last := netip.AddrFrom16(lo), netip.AddrFrom16(hi)
	e.network(t, name, args...)
	e.run(t, ctr{name: ctrName}, name)
	c := e.inspect6(t, ctrName, name)
	t.Logf("%s: docker inspect: MAC %s, IPv4 %s/%d, IPv6 %s/%d gateway %q", ctrName, c.mac, c.IPAddress, c.IPPrefixLen, c.GlobalIPv6Address, c.GlobalIPv6PrefixLen, c.IPv6Gateway)
	addr, err := netip.ParseAddr(c.GlobalIPv6Address)
	if err != nil || addr.Less(first) || last.Less(addr) || c.GlobalIPv6PrefixLen != 128 {
		t.Fatalf("%s: docker inspect shows IPv6 %q/%d; want an address of dnsmasq's range %s-%s, /128", ctrName, c.GlobalIPv6Address, c.GlobalIPv6PrefixLen, first, last)
	}
	// dnsmasq rewrites its lease file after it answers (truncating it
	// first): wait for the lease.
	var lease itest.Dnsmasq6Lease
	var ok bool
	itest.WaitFor(leaseWait, func() bool {
		lease, ok = l.d.Lease6(addr)
		return ok && lease.DUID == duidLL(c.mac)
	})
	if !ok || lease.DUID != duidLL(c.mac) {
		t.Fatalf("%s has %s with MAC %s (DUID-LL %s); dnsmasq's lease file: %q\n%+v", ctrName, addr, c.mac, duidLL(c.mac), lease.Line, l.d.Leases6())
	}
	t.Logf("%s: dnsmasq: %s", ctrName, lease.Line)
	if ps, out, err := e.addrs6(ctrName, "global"); err != nil || len(ps) != 1 || ps[0] != netip.PrefixFrom(addr, 128) {
		t.Errorf("%s: global addresses on eth0 %v (%v): %q; want %s/128 alone", ctrName, ps, err, out, addr)
	}
	var addr4 netip.Addr
	if docker4 {
		if a4, err := netip.ParseAddr(c.IPAddress); err != nil || !netip.MustParsePrefix("198.18.187.0/24").Contains(a4) {
			t.Errorf("%s: docker inspect shows IPv4 %q; want Docker's address of 198.18.187.0/24", ctrName, c.IPAddress)
		}
		if dis, err := e.exec(ctrName, "cat", "/proc/sys/net/ipv6/conf/eth0/disable_ipv6"); err != nil || dis != "0" {
			t.Errorf("%s: eth0's disable_ipv6 is %q (%v); want 0 (the engine keeps IPv6 on for the address underlay gave)", ctrName, dis, err)
		}
	}
	if dual {
		if addr4, err = netip.ParseAddr(c.IPAddress); err != nil || !netip.MustParsePrefix("198.18.183.0/24").Contains(addr4) || c.IPPrefixLen != 24 {
			t.Fatalf("%s: docker inspect shows IPv4 %q/%d; want an address of 198.18.183.0/24", ctrName, c.IPAddress, c.IPPrefixLen)
		}
		if l4, ok := l.d.Dnsmasq.WaitLease(leaseWait, addr4, func(l4 itest.DnsmasqLease) bool { return l4.MAC == c.MacAddress }); !ok || l4.MAC != c.MacAddress {
			t.Fatalf("%s has %s with MAC %s; dnsmasq's lease file: %q", ctrName, addr4, c.MacAddress, l4.Line)
		}
		if out, _ := e.exec(ctrName, "ip", "-4", "route", "show", "default"); !strings.Contains(out, "default via "+router4+" dev eth0") {
			t.Errorf("%s: IPv4 default route %q; want via %s", ctrName, out, router4)
		}
		e.ping(t, ctrName, router4)
	}
	e.wantDefault6(t, ctrName, l)
	e.ping(t, ctrName, l.router.Addr().String())

	e.must(t, "rm", "-f", ctrName)
	eventually(t, 15*time.Second, ctrName+"'s leases leave dnsmasq's lease file", func() error {
		if l6, ok := l.d.Lease6(addr); ok {
			return fmt.Errorf("lease file still has %q", l6.Line)
		}
		if l4, ok := l.d.Lease(addr4); dual && ok {
			return fmt.Errorf("lease file still has %q", l4.Line)
		}
		return nil
	})
	e.must(t, "network", "rm", name)
	l.d.Stop()
	if err := teardownIPv6LAN(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s took %s", kind, time.Since(start).Round(100*time.Millisecond))
}
