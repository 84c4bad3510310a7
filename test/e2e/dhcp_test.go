//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/itest"
)

// DHCP through a real engine: a LAN of the test's own with dnsmasq as its
// DHCP server, a `-o dhcp=true --ipam-driver null` network of the managed
// plugin on it, and containers that get their addresses, gateway and
// routes from dnsmasq's leases. The LAN: the veth vdhcp in the suite's
// namespace (the parent) and its peer vdhcp-s in the namespace
// underlay-e2e-dhcp, with the router 198.18.180.1/24 and dnsmasq. Both
// are found again by their fixed names: teardownAll removes them after a
// killed run (teardownDHCPLAN), checkHostUntouched checks they are gone.
//
// Not covered here: ipvlan containers. The host kernel of these machines
// has no ipvlan module, so an ipvlan endpoint cannot be created in this
// engine's namespace; the VM covers ipvlan: leases through the binary (the
// parent's MAC, a client ID per endpoint) in
// test/integration/vm_dhcp_test.go, and two containers of a dockerd running
// in the VM in test/vmdocker (make test-vm-docker).
const (
	dhcpNS        = nsName + "-dhcp"
	dhcpNSPath    = "/run/netns/" + dhcpNS
	dhcpParent    = "vdhcp"
	dhcpSrvLink   = "vdhcp-s"
	dhcpRouter    = "198.18.180.1"
	dhcpRouteDst  = "198.18.181.0/24" // option 121's other route, via the router
	dhcpLeaseTime = 2 * time.Minute   // dnsmasq's shortest: T1 at 60 s
)

var dhcpRange = netip.MustParsePrefix("198.18.180.0/24")

// dhcpDir holds dnsmasq's lease file, log and pid file.
func dhcpDir() string { return filepath.Join(dataDir, "dhcp") }

// makeDHCPLAN creates the LAN and starts dnsmasq on it; both go at
// cleanup (and with teardownAll after a killed run).
func (e *env) makeDHCPLAN(t *testing.T) *itest.Dnsmasq {
	t.Helper()
	if err := teardownDHCPLAN(); err != nil {
		t.Fatalf("remove an earlier DHCP LAN: %v", err)
	}
	t.Cleanup(func() {
		if err := teardownDHCPLAN(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := ipCmds(
		[]string{"netns", "add", dhcpNS},
		[]string{"-n", dhcpNS, "link", "set", "lo", "up"},
		[]string{"-n", nsName, "link", "add", dhcpParent, "mtu", "1500", "type", "veth", "peer", "name", dhcpSrvLink, "netns", dhcpNS},
		[]string{"-n", nsName, "link", "set", dhcpParent, "up"},
		[]string{"-n", dhcpNS, "addr", "add", dhcpRouter + "/24", "dev", dhcpSrvLink},
		[]string{"-n", dhcpNS, "link", "set", dhcpSrvLink, "up"},
	); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dhcpDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return itest.StartDnsmasq(t, dhcpServer())
}

// dhcpServer is dnsmasq's configuration on the LAN.
func dhcpServer() itest.DnsmasqConfig {
	return itest.DnsmasqConfig{Netns: dhcpNSPath, Interface: dhcpSrvLink, Dir: dhcpDir(),
		Range: "198.18.180.100,198.18.180.150,255.255.255.0,2m",
		// Option 121 (classless routes) replaces option 3 for clients
		// that ask for it (RFC 3442), so it carries the default route too.
		Options: []string{"3," + dhcpRouter, "121,0.0.0.0/0," + dhcpRouter + "," + dhcpRouteDst + "," + dhcpRouter},
		// Its DNS too (the LAN learns the containers' names: TestComposeDHCP).
		DNS: true,
		// Without --no-ping dnsmasq pings every new address for about 3 s
		// before it offers it.
		Extra: []string{"--no-ping"}}
}

// teardownDHCPLAN kills every process in the DHCP LAN's namespace
// (dnsmasq), deletes the LAN's veth and the namespace, and removes
// dnsmasq's files. Nothing of it is in the host's namespace.
func teardownDHCPLAN() error { return teardownLAN(dhcpNS, dhcpNSPath, dhcpParent, dhcpDir()) }

// dhcpLANLeft reports what is left of the DHCP LAN after cleanup.
func dhcpLANLeft() error { return lanLeft(dhcpNS, dhcpNSPath) }

// teardownLAN kills every process in a test LAN's namespace ns (at
// nsPath), deletes its parent veth from the suite's namespace, the
// namespace itself and dir.
func teardownLAN(ns, nsPath, parent, dir string) error {
	var errs []error
	for i := 0; i < 2; i++ {
		pids := processesInNetns(nsPath)
		if len(pids) == 0 {
			break
		}
		if i == 1 {
			errs = append(errs, fmt.Errorf("processes in %s still running after SIGKILL: %v", ns, pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitGone(pid, 10*time.Second)
		}
	}
	// The parent goes even without the LAN's namespace (a veth whose peer
	// stayed in the engine's namespace: TestIPv6LAN's refusal case).
	if _, err := exec.Command("ip", "-n", nsName, "link", "show", parent).CombinedOutput(); err == nil {
		if out, err := exec.Command("ip", "-n", nsName, "link", "del", parent).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip -n %s link del %s: %v: %s", nsName, parent, err, out))
		}
	}
	if err := delNetns(ns); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// lanLeft reports what is left of a test LAN's namespace after cleanup.
func lanLeft(ns, nsPath string) error {
	var errs []error
	if pids := processesInNetns(nsPath); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes left in %s: %v", ns, pids))
	}
	if _, err := os.Lstat(nsPath); err == nil {
		errs = append(errs, fmt.Errorf("namespace %s left", ns))
	}
	return errors.Join(errs...)
}

// processesInNetns lists the processes in the namespace at path.
func processesInNetns(path string) []int {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	// A cgroup parent no process is in: only the namespace counts.
	return processesIn(path, "/underlay-e2e-no-such-cgroup")
}

// leaseWait is how long a test waits for dnsmasq's lease file or log to
// show an exchange the client already has the answer of: dnsmasq answers
// first and rewrites its lease file afterwards (truncating it first), so
// a read right after the reply may see the old file, or an empty one.
const leaseWait = 10 * time.Second

// dhcpCtr is a container of the DHCP network as Docker and dnsmasq see it.
type dhcpCtr struct {
	name  string
	addr  netip.Addr
	mac   string
	lease itest.DnsmasqLease
}

// TestDHCP: containers on a dhcp=true network get distinct addresses of
// dnsmasq's range that dnsmasq has leased to their MACs, shown by docker
// inspect; their default route is via the LAN's router (option 121) with
// the other classless route beside it; they reach the router and each
// other. With the plugin force-disabled and enabled again right after
// the containers started, the restarted plugin renews both leases at T1
// (dnsmasq's expiry moves forward); `docker rm -f` releases a container's
// lease (its line leaves the lease file) and leaves the other's.
func TestDHCP(t *testing.T) {
	e := need(t)
	start := time.Now()
	e.ensurePlugin(t)
	e.wantNoLeak(t, "before the test")
	t.Log("ipvlan: not run here, this host's kernel has no ipvlan module; the VM covers it (test/integration/vm_dhcp_test.go, and Docker containers in test/vmdocker)")
	d := e.makeDHCPLAN(t)
	id := e.network(t, "n9", "-d", plugin, "--ipam-driver", "null", "-o", "parent="+dhcpParent, "-o", "dhcp=true")
	t.Logf("network n9 %s on %s; LAN ready after %s", dockerid.Short(id), dhcpParent, time.Since(start).Round(100*time.Millisecond))

	cs := []*dhcpCtr{{name: "c9a"}, {name: "c9b"}}
	for _, c := range cs {
		e.run(t, ctr{name: c.name}, "n9")
	}
	e.waitRunning(t, 30*time.Second, "c9a", "c9b")
	for _, c := range cs {
		var nets map[string]struct {
			IPAddress, Gateway, MacAddress string
			IPPrefixLen                    int
		}
		if err := e.jsonOut(&nets, "inspect", "-f", "{{json .NetworkSettings.Networks}}", c.name); err != nil {
			t.Fatal(err)
		}
		n, ok := nets["n9"]
		addr, err := netip.ParseAddr(n.IPAddress)
		if !ok || err != nil || !dhcpRange.Contains(addr) || n.IPPrefixLen != 24 || n.MacAddress == "" {
			t.Fatalf("docker inspect %s: %+v: want an address of %s/24 and a MAC on n9", c.name, nets, dhcpRange)
		}
		c.addr, c.mac = addr, n.MacAddress
		var found bool
		c.lease, found = d.WaitLease(leaseWait, addr, func(l itest.DnsmasqLease) bool { return l.MAC == c.mac })
		if !found || c.lease.MAC != c.mac {
			t.Fatalf("%s has %s with MAC %s; dnsmasq's lease file: %q", c.name, addr, c.mac, c.lease.Line)
		}
		t.Logf("%s: %s/%d MAC %s gateway %q; dnsmasq: %s", c.name, addr, n.IPPrefixLen, c.mac, n.Gateway, c.lease.Line)
		if n.Gateway != dhcpRouter {
			t.Errorf("docker inspect %s: gateway %q, want the router %s", c.name, n.Gateway, dhcpRouter)
		}
	}
	if cs[0].addr == cs[1].addr {
		t.Fatalf("both containers got %s", cs[0].addr)
	}

	// At once, so that the containers' first T1 (60 s) covers it: the
	// plugin force-disabled under the running containers and enabled
	// again.
	old := pluginPids()
	e.must(t, "plugin", "disable", "-f", plugin)
	e.must(t, "plugin", "enable", plugin)
	eventually(t, 30*time.Second, "the plugin runs again", func() error {
		if p := pluginPids(); len(p) != 1 || (len(old) == 1 && p[0] == old[0]) {
			return fmt.Errorf("plugin processes %v (before %v)", p, old)
		}
		return nil
	})
	enabled := time.Now()
	t.Logf("plugin disabled -f and enabled again %s after the first lease (T1 is at 60 s)", enabled.Sub(cs[0].lease.Expiry.Add(-dhcpLeaseTime)).Round(100*time.Millisecond))

	for _, c := range cs {
		routes, err := e.exec(c.name, "ip", "-4", "route")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"default via " + dhcpRouter + " dev eth0", dhcpRouteDst + " via " + dhcpRouter + " dev eth0"} {
			if !strings.Contains(routes, want) {
				t.Errorf("routes in %s:\n%s\nwant %q", c.name, routes, want)
			}
		}
		e.ping(t, c.name, dhcpRouter)
	}
	e.ping(t, "c9a", cs[1].addr.String())
	e.ping(t, "c9b", cs[0].addr.String())

	// Renewal at T1 by the plugin that was enabled again.
	for _, c := range cs {
		deadline := c.lease.Expiry.Add(-dhcpLeaseTime / 2).Add(15 * time.Second)
		var now itest.DnsmasqLease
		within(t, time.Until(deadline), "dnsmasq's expiry of "+c.addr.String()+" moves forward", func() error {
			var ok bool
			if now, ok = d.Lease(c.addr); !ok || !now.Expiry.After(c.lease.Expiry) || now.MAC != c.mac {
				return fmt.Errorf("lease file line %q, was %q", now.Line, c.lease.Line)
			}
			return nil
		}, func() { t.Logf("dnsmasq's log:\n%s", itest.TailLines(d.Log(), 40)) })
		t.Logf("%s: renewed %s after it was leased: %s", c.name, time.Since(c.lease.Expiry.Add(-dhcpLeaseTime)).Round(100*time.Millisecond), now.Line)
		c.lease = now
	}
	// dnsmasq's lease file moves at its ACK; the plugin's line for that
	// renewal follows once the plugin has the ACK and reaches dockerd's
	// log through the engine's relay of the plugin's output (seen 0.1 s
	// behind on the current engine): give it a moment.
	var log string
	within(t, 10*time.Second, "the plugin logs one renewal per container", func() error {
		log = e.logSinceMark()
		if n := strings.Count(log, "renewed DHCP lease"); n < 2 {
			return fmt.Errorf("the plugin logged %d renewals, want one per container", n)
		}
		return nil
	}, func() {})
	for _, bad := range []string{"could not renew", "could not release", "DHCP lease expired", "refused to renew"} {
		if strings.Contains(log, bad) {
			t.Errorf("the plugin logged %q:\n%s", bad, itest.TailLines(log, 40))
		}
	}

	// docker rm -f releases the lease; the other container keeps its own.
	e.must(t, "rm", "-f", "c9a")
	eventually(t, 15*time.Second, "c9a's lease leaves dnsmasq's lease file", func() error {
		if l, ok := d.Lease(cs[0].addr); ok {
			return fmt.Errorf("lease file still has %q", l.Line)
		}
		return nil
	})
	// The file read above may have been one dnsmasq was rewriting
	// (truncated): c9b's line and the release in the log are awaited too.
	if l, ok := d.WaitLease(leaseWait, cs[1].addr, func(l itest.DnsmasqLease) bool { return l.MAC == cs[1].mac }); !ok || l.MAC != cs[1].mac {
		t.Fatalf("after c9a's release, c9b's lease of %s is %q", cs[1].addr, l.Line)
	}
	if !itest.WaitFor(leaseWait, func() bool {
		return strings.Contains(d.Log(), "DHCPRELEASE("+dhcpSrvLink+") "+cs[0].addr.String()+" "+cs[0].mac)
	}) {
		t.Errorf("dnsmasq logged no DHCPRELEASE of %s from %s:\n%s", cs[0].addr, cs[0].mac, itest.TailLines(d.Log(), 20))
	}
	e.must(t, "rm", "-f", "c9b")
	eventually(t, 15*time.Second, "c9b's lease leaves dnsmasq's lease file", func() error {
		if ls := d.Leases(); len(ls) > 0 {
			return fmt.Errorf("lease file still has %v", ls)
		}
		return nil
	})
	e.removeNetwork(t, "n9")
	d.Stop()
	if err := teardownDHCPLAN(); err != nil {
		t.Fatal(err)
	}
	e.wantNoLeak(t, "after the test")
	t.Logf("TestDHCP took %s", time.Since(start).Round(100*time.Millisecond))
}
