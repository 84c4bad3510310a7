//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The IPAM driver through a real engine: `--ipam-driver underlay:latest`
// on networks of the managed plugin. Every address involved is in
// 198.18.0.0/15: automatic pools come from pluginAddressPools
// (198.18.64.0/18), the parent LAN of TestIPAMParentLAN is 198.18.190.0/24.

// ipamBase is the only range automatic pools may come from.
var ipamBase = netip.MustParsePrefix("198.18.64.0/18")

// ensureIPAMPlugin is ensurePlugin plus the suite's DEFAULT_ADDRESS_POOLS:
// a plugin an earlier test installed another way (docker plugin install
// from the registry) is set again, so no automatic pool ever comes from
// the daemon's default 172.16.0.0/12.
func (e *env) ensureIPAMPlugin(t *testing.T) {
	t.Helper()
	e.ensurePlugin(t)
	want := "DEFAULT_ADDRESS_POOLS=" + pluginAddressPools
	if env := e.must(t, "plugin", "inspect", "-f", "{{json .Settings.Env}}", plugin); !strings.Contains(env, `"`+want+`"`) {
		t.Logf("plugin env %s lacks %s: setting the suite's settings", env, want)
		e.disablePlugin(t)
		e.must(t, append([]string{"plugin", "set", plugin}, pluginSettings...)...)
		e.must(t, "plugin", "enable", plugin)
		e.ensurePlugin(t)
	}
}

// ipamNet creates a network of the plugin with the plugin as IPAM driver
// (no --subnet unless in args) and removes it at cleanup. It returns the
// error instead of failing, for concurrent use.
func (e *env) ipamNet(t *testing.T, name, parent string, args ...string) (string, error) {
	t.Cleanup(func() { e.removeNetwork(t, name) })
	return e.docker(append(append([]string{"network", "create", "-d", plugin, "--ipam-driver", plugin, "-o", "parent=" + parent}, args...), name)...)
}

// ipamConfig is a network's one IPv4 pool as docker network inspect shows
// it.
func (e *env) ipamConfig(t *testing.T, name string) (subnet netip.Prefix, gateway netip.Addr) {
	t.Helper()
	var ni []netInspect
	if err := e.jsonOut(&ni, "network", "inspect", name); err != nil {
		t.Fatal(err)
	}
	if len(ni) != 1 || len(ni[0].IPAM.Config) != 1 {
		t.Fatalf("network inspect %s: %+v; want one network with one IPAM config", name, ni)
	}
	c := ni[0].IPAM.Config[0]
	subnet, err := netip.ParsePrefix(c.Subnet)
	if err != nil {
		t.Fatalf("network %s: subnet %q: %v", name, c.Subnet, err)
	}
	if c.Gateway != "" {
		if gateway, err = netip.ParseAddr(c.Gateway); err != nil {
			t.Fatalf("network %s: gateway %q: %v", name, c.Gateway, err)
		}
	}
	return subnet, gateway
}

var inetRE = regexp.MustCompile(`inet ([0-9.]+/[0-9]+) `)

// eth0v4 is the IPv4 address (with prefix length) on eth0 as a container
// sees it.
func (e *env) eth0v4(name string) (netip.Prefix, error) {
	out, err := e.exec(name, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		return netip.Prefix{}, err
	}
	m := inetRE.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		return netip.Prefix{}, fmt.Errorf("%s: eth0 has %d IPv4 addresses: %q", name, len(m), out)
	}
	return netip.ParsePrefix(m[0][1])
}

// runDetached starts a sleeping container on a network and removes it at
// cleanup; it returns the error instead of failing, for concurrent use.
func (e *env) runDetached(t *testing.T, name, netName string, extra ...string) error {
	t.Cleanup(func() { _, _ = e.docker("rm", "-f", name) })
	args := append([]string{"run", "-d", "--stop-timeout", "1", "--name", name, "--network", netName}, extra...)
	_, err := e.docker(append(args, imageTag, "sleep", "86400")...)
	return err
}

// concurrently runs fn(0..n-1) at once and returns the errors.
func concurrently(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = fn(i) }(i)
	}
	wg.Wait()
	return errs
}

// inBenchmarkRange fails unless p lies in 198.18.0.0/15.
func inBenchmarkRange(t *testing.T, what string, p netip.Prefix) {
	t.Helper()
	if !netip.MustParsePrefix("198.18.0.0/15").Contains(p.Addr()) || p.Bits() < 15 {
		t.Errorf("%s: %s is outside 198.18.0.0/15", what, p)
	}
}

// 16 concurrent `docker network create` without --subnet on one parent:
// all succeed with 16 distinct, non-overlapping subnets of the configured
// base (overlapping subnets on one parent would be refused by the network
// driver, so all 16 coexisting is the proof), and a container on each gets
// an address of its network's subnet.
func TestIPAMAutoPoolsConcurrent(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	const n, parent = 16, "vp10"
	netName := func(i int) string { return fmt.Sprintf("n6a%02d", i) }
	ctrName := func(i int) string { return fmt.Sprintf("c6a%02d", i) }
	for i, err := range concurrently(n, func(i int) error { _, err := e.ipamNet(t, netName(i), parent); return err }) {
		if err != nil {
			t.Errorf("network %s: %v", netName(i), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	subnets := make([]netip.Prefix, n)
	gateways := make([]netip.Addr, n)
	for i := 0; i < n; i++ {
		subnets[i], gateways[i] = e.ipamConfig(t, netName(i))
		t.Logf("%s: subnet %s gateway %s", netName(i), subnets[i], gateways[i])
		inBenchmarkRange(t, netName(i), subnets[i])
		if !ipamBase.Contains(subnets[i].Addr()) || subnets[i].Bits() != 24 {
			t.Errorf("%s: subnet %s, want a /24 of the configured base %s", netName(i), subnets[i], ipamBase)
		}
		if !subnets[i].Contains(gateways[i]) {
			t.Errorf("%s: gateway %s is not in its subnet %s", netName(i), gateways[i], subnets[i])
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if subnets[i].Overlaps(subnets[j]) {
				t.Errorf("%s (%s) and %s (%s) overlap", netName(i), subnets[i], netName(j), subnets[j])
			}
		}
	}

	for i, err := range concurrently(n, func(i int) error { return e.runDetached(t, ctrName(i), netName(i)) }) {
		if err != nil {
			t.Errorf("container %s on %s: %v", ctrName(i), netName(i), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for i := 0; i < n; i++ {
		a, err := e.eth0v4(ctrName(i))
		if err != nil {
			t.Errorf("%s: %v", ctrName(i), err)
			continue
		}
		inBenchmarkRange(t, ctrName(i), a)
		if !subnets[i].Contains(a.Addr()) || a.Bits() != subnets[i].Bits() || a.Addr() == gateways[i] {
			t.Errorf("%s: eth0 %s, want an address of %s (%s) other than the gateway %s", ctrName(i), a, netName(i), subnets[i], gateways[i])
		}
	}

	// Removed networks give their pools back: a new automatic network gets
	// the lowest of them again.
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, ctrName(i))
	}
	e.must(t, append([]string{"rm", "-f"}, names...)...)
	names = names[:0]
	for i := 0; i < n; i++ {
		names = append(names, netName(i))
	}
	e.must(t, append([]string{"network", "rm"}, names...)...)
	lowest := append([]netip.Prefix(nil), subnets...)
	sort.Slice(lowest, func(i, j int) bool { return lowest[i].Addr().Less(lowest[j].Addr()) })
	if _, err := e.ipamNet(t, "n6again", parent); err != nil {
		t.Fatal(err)
	}
	if again, _ := e.ipamConfig(t, "n6again"); again != lowest[0] {
		t.Errorf("after the 16 networks were removed a new automatic network got %s; want the lowest freed pool %s", again, lowest[0])
	}
	e.must(t, "network", "rm", "n6again")
	e.wantNoLeak(t, "after the networks were removed")
}

// --ipam-opt parent=IFACE: the network's subnet is IFACE's LAN (learned, or
// given as --subnet where the engine needs it), its gateway the LAN's
// gateway (the default route via IFACE), and containers get LAN addresses
// that are never the host's own on IFACE nor the gateway.
//
// "connected route" is the LAN as every host has it: the address brings
// its on-link route into the main table. "no prefix route" is the same LAN
// with the address added noprefixroute (and the default route onlink), so
// the main table has no route over the LAN: engine 20.10 checks automatic
// pools (no --subnet) against the main table's routes and asks the IPAM
// again while holding an overlapping one, which the connected route always
// triggers for a parent's LAN.
func TestIPAMParentLAN(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	t.Run("connected route", func(t *testing.T) { e.parentLAN(t, false) })
	t.Run("no prefix route", func(t *testing.T) { e.parentLAN(t, true) })
}

func (e *env) parentLAN(t *testing.T, noPrefixRoute bool) {
	const parent = "vp11"
	lan := netip.MustParsePrefix("198.18.190.0/24")
	gw := netip.MustParseAddr("198.18.190.1")
	// The host's own addresses: .2 (the primary, which IPAM learns the LAN
	// from) and .4 (a secondary), so the lowest free address after the
	// gateway is one of the host's.
	own := []netip.Addr{netip.MustParseAddr("198.18.190.2"), netip.MustParseAddr("198.18.190.4")}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", nsName}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", nsName, strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "-n", nsName, "addr", "flush", "dev", parent).Run() })
	for _, a := range own {
		add := []string{"addr", "add", netip.PrefixFrom(a, lan.Bits()).String(), "dev", parent}
		if noPrefixRoute {
			add = append(add, "noprefixroute")
		}
		ip(add...)
	}
	// The LAN's default route. The suite's namespace has none (ctl0 is
	// on-link only); should it ever have one, the route goes into a table
	// of its own, which no rule selects: IPAM reads every table, and no
	// packet takes it.
	route := []string{"route", "add", "default", "via", gw.String(), "dev", parent}
	if noPrefixRoute {
		route = append(route, "onlink")
	}
	if out, err := exec.Command("ip", "-n", nsName, "-4", "route", "show", "default").Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Logf("the namespace has a default route already (%q, %v): planting the LAN's in table 190", strings.TrimSpace(string(out)), err)
		route = append(route, "table", "190")
	}
	ip(route...)
	t.Cleanup(func() {
		del := append([]string{"-n", nsName}, append([]string{"route", "del"}, route[2:]...)...)
		_ = exec.Command("ip", del...).Run()
	})
	routes, _ := exec.Command("ip", "-n", nsName, "-4", "route", "show", "table", "all").CombinedOutput()
	var shown []string
	for _, l := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
		if !strings.Contains(l, "table local") {
			shown = append(shown, l)
		}
	}
	t.Logf("IPv4 routes of the namespace (table local left out):\n%s", strings.Join(shown, "\n"))

	const netName = "n6b"
	args := []string{"--ipam-opt", "parent=" + parent}
	if !noPrefixRoute {
		// Engine 20.10 checks a pool it did not ask for by subnet against
		// the host's routes, and a LAN overlaps its connected route: the
		// refusal says to pass the LAN as --subnet, which then works, its
		// gateway still learned from the host. The current engine does
		// the same (it asks again for a pool that overlaps a host route).
		out, err := e.ipamNet(t, netName, parent, args...)
		hint := fmt.Sprintf("--subnet %s with --ipam-opt parent=%s", lan, parent)
		if err == nil || !strings.Contains(out, hint) {
			t.Fatalf("a parent's LAN without --subnet: %v %q, want a refusal saying %q", err, out, hint)
		}
		args = append(args, "--subnet", lan.String())
	}
	if out, err := e.ipamNet(t, netName, parent, args...); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	subnet, gateway := e.ipamConfig(t, netName)
	t.Logf("%s: subnet %s gateway %s", netName, subnet, gateway)
	// With --subnet given, docker network inspect shows the IPAM config as
	// the user gave it (no gateway); the gateway Docker uses is checked on
	// every container's default route below.
	if subnet != lan || (gateway != gw && (noPrefixRoute || gateway.IsValid())) {
		t.Errorf("%s: subnet %s gateway %s; want %s's LAN %s and its gateway %s", netName, subnet, gateway, parent, lan, gw)
	}

	taken := map[netip.Addr]string{gw: "the gateway", own[0]: "the host's own", own[1]: "the host's own"}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("c6b%d", i)
		if err := e.runDetached(t, name, netName); err != nil {
			t.Fatal(err)
		}
		a, err := e.eth0v4(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: eth0 %s", name, a)
		inBenchmarkRange(t, name, a)
		if a.Masked() != lan {
			t.Errorf("%s: eth0 %s, want an address of the LAN %s", name, a, lan)
		}
		if what, ok := taken[a.Addr()]; ok {
			t.Errorf("%s: eth0 %s is %s", name, a, what)
		}
		taken[a.Addr()] = "held by " + name
		if r, err := e.exec(name, "ip", "-4", "route", "show", "default"); err != nil || !strings.Contains(r, "via "+gw.String()+" dev eth0") {
			t.Errorf("%s: default route %q (%v), want via the LAN's gateway %s", name, r, err, gw)
		}
	}
	for i := 0; i < 4; i++ {
		e.must(t, "rm", "-f", fmt.Sprintf("c6b%d", i))
	}
	e.must(t, "network", "rm", netName)
	e.wantNoLeak(t, "after the network was removed")
}

// A dockerd restart, and a dockerd crash, keep the network's subnet, and
// never hand a new container an address a live container holds: restart
// policy containers come back by themselves, one without a policy is
// started again by hand, and new containers start beside them.
func TestIPAMRestartKeepsAddresses(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	const parent, netName = "vp12", "n6c"
	if _, err := e.ipamNet(t, netName, parent); err != nil {
		t.Fatal(err)
	}
	subnet, gateway := e.ipamConfig(t, netName)
	t.Logf("%s: subnet %s gateway %s", netName, subnet, gateway)
	inBenchmarkRange(t, netName, subnet)

	always := []string{"c6ca", "c6cb"}
	manual := []string{"c6cc"}
	for _, c := range always {
		if err := e.runDetached(t, c, netName, "--restart=always"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range manual {
		if err := e.runDetached(t, c, netName); err != nil {
			t.Fatal(err)
		}
	}

	// addrs reads every running container's address and checks them:
	// distinct, in the subnet, never the gateway.
	addrs := func(t *testing.T, phase string, names []string) map[string]netip.Addr {
		t.Helper()
		got := map[string]netip.Addr{}
		holder := map[netip.Addr]string{}
		for _, c := range names {
			a, err := e.eth0v4(c)
			if err != nil {
				t.Errorf("%s: %v", phase, err)
				continue
			}
			got[c] = a.Addr()
			switch {
			case a.Masked() != subnet:
				t.Errorf("%s: %s has %s, outside the network's subnet %s", phase, c, a, subnet)
			case a.Addr() == gateway:
				t.Errorf("%s: %s has the gateway's address %s", phase, c, a)
			case holder[a.Addr()] != "":
				t.Errorf("%s: %s got %s, which %s still holds", phase, c, a, holder[a.Addr()])
			}
			holder[a.Addr()] = c
		}
		t.Logf("%s: %v", phase, got)
		return got
	}
	live := append(append([]string{}, always...), manual...)
	before := addrs(t, "before", live)

	phases := []struct {
		name string
		do   func(*testing.T)
	}{
		{"dockerd restart", e.restartDockerd},
		{"dockerd crash", e.crashDockerd},
	}
	top := t // containers of a phase live on into the next: clean up at the end
	for k, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			ph.do(t)
			e.waitRunning(t, 90*time.Second, always...)
			// Containers without a policy stay stopped: start them again.
			var stopped []string
			for _, c := range live {
				if out, _ := e.docker("inspect", "-f", "{{.State.Running}}", c); out != "true" {
					stopped = append(stopped, c)
				}
			}
			for _, c := range stopped {
				if _, err := e.docker("start", c); err != nil {
					state, _ := e.docker("inspect", "-f", "{{json .State}}", c)
					t.Fatalf("%v (state %s)", err, state)
				}
			}
			e.waitRunning(t, 60*time.Second, stopped...)
			if s, g := e.ipamConfig(t, netName); s != subnet || g != gateway {
				t.Errorf("after the %s %s has subnet %s gateway %s; before %s %s", ph.name, netName, s, g, subnet, gateway)
			}
			now := addrs(t, "after the "+ph.name, live)
			for c, a := range before {
				if now[c] != a {
					t.Logf("%s: %s had %s, now %s (Docker asks again for an address it did not pin)", ph.name, c, a, now[c])
				}
			}
			// New containers: never an address a live container holds.
			for i := 0; i < 3; i++ {
				c := fmt.Sprintf("c6cn%d%d", k, i)
				if err := e.runDetached(top, c, netName); err != nil {
					t.Fatal(err)
				}
				live = append(live, c)
			}
			before = addrs(t, "new containers after the "+ph.name, live)
		})
	}
	e.must(t, append([]string{"rm", "-f"}, live...)...)
	e.must(t, "network", "rm", netName)
	e.wantNoLeak(t, "after the network was removed")
}
