//go:build vmdocker

package vmdocker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// Issue 24's proofs that need a kernel with dummy and ipvlan links (the
// host of CI has neither: test/e2e's TestGatewayNotReserved and
// TestIPv6Only run their macvlan cases there and point here for these).
// Each test runs on the engine the VM bundles: Debian's 20.10
// (`make test-vm-docker`) or the current engine of engines/current.env
// (`make test-vm-docker-current`: test/vm/run.sh with VM_DOCKERD and
// VM_RUNC). What differs between them is an engine method below, asked by
// the tests; nothing is skipped on either engine.

// engine is what the VM's dockerd says of itself.
type engine struct {
	Version, APIVersion string
	api                 [2]int
}

func askEngine(t *testing.T, dk *itest.Dockerd) engine {
	t.Helper()
	out := dk.Must("version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}")
	var e engine
	f := strings.Fields(out)
	if len(f) == 2 {
		e.Version, e.APIVersion = f[0], f[1]
		maj, min, ok := strings.Cut(e.APIVersion, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(min)
		if ok && err1 == nil && err2 == nil {
			e.api = [2]int{a, b}
			return e
		}
	}
	t.Fatalf("docker version: %q: want the server's version and API version", out)
	return e
}

func (e engine) String() string {
	return fmt.Sprintf("engine dockerd %s (API %s)", e.Version, e.APIVersion)
}

func (e engine) apiAtLeast(major, minor int) bool {
	return e.api[0] > major || e.api[0] == major && e.api[1] >= minor
}

// asksGwAlloc: the engine asks a driver whose capabilities say
// GwAllocChecker whether to reserve a gateway address
// (/NetworkDriver.GwAllocCheck). The current engine (API 1.56) does;
// 20.10 (API 1.41) does not and reserves the subnet's first address on
// every network. Engines between them are not run here: the threshold is
// test/e2e's (engine_test.go), the newest fact checked.
func (e engine) asksGwAlloc() bool { return e.apiAtLeast(1, 52) }

// showsPickedGateway: docker network inspect shows the gateway address
// the engine picked for a --subnet given without --gateway (the current
// engine); 20.10 shows the IPAM config as given, without one, even where
// it reserved one.
func (e engine) showsPickedGateway() bool { return e.apiAtLeast(1, 52) }

// ipv4Optional: the engine knows EnableIPv4 false (API 1.48, engine 28):
// IPv6-only networks. 20.10 ignores the field and gives every network
// IPv4.
func (e engine) ipv4Optional() bool { return e.apiAtLeast(1, 48) }

// failOnEngine names the engine at the end of a failed test's output.
func failOnEngine(t *testing.T, e engine) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("this failure is on %s", e)
		}
	})
}

// engineSetup starts, in a namespace of the test's own, the VM's dockerd
// (its default address pool in 198.18.224.0/20: the tests give every
// subnet, and nothing may come from Docker's defaults) and underlay as its
// legacy plugin, and imports the busybox image bb:vm.
func engineSetup(t *testing.T) (*itest.Netns, *itest.Dockerd, *itest.Daemon, engine) {
	t.Helper()
	start := time.Now()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	itest.RequireDocker(t)
	dk := itest.StartDockerd(t, ns, "--ip6tables=false", "--default-address-pool", "base=198.18.224.0/20,size=24")
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Env: []string{"DOCKER_HOST=" + dk.Host()}})
	itest.LegacyPlugin(t, "underlay", d.Socket)
	e := askEngine(t, dk)
	failOnEngine(t, e)
	dk.ImportBusybox("bb:vm")
	t.Logf("%s, underlay (legacy plugin) and image ready after %s", e, time.Since(start).Round(100*time.Millisecond))
	return ns, dk, d, e
}

// inets are the addresses (inet A/len) of `ip -o addr` output.
func inets(out string) []string {
	var as []string
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "inet" || f[i] == "inet6" {
			as = append(as, f[i+1])
		}
	}
	return as
}

// TestDockerEngine: issue 24's checks below on the VM's engine, one
// dockerd for both (starting one takes a minute under emulation). At the
// end the namespace holds only the parents the test made: removing the
// networks removed every link of underlay's (the parentless network's
// own dummy link included).
func TestDockerEngine(t *testing.T) {
	start := time.Now()
	ns, dk, d, e := engineSetup(t)
	t.Run("GatewayNotReserved", func(t *testing.T) { gatewayNotReserved(t, ns, dk, d, e) })
	t.Run("IPv6Only", func(t *testing.T) { ipvlanIPv6Only(t, ns, dk, e) })
	ns.WantLinks(append([]string{"lo"}, parents...)...)
	t.Logf("took %s on %s", time.Since(start).Round(100*time.Millisecond), e)
}

// parents are the links addParent made.
var parents []string

// addParent makes an up veth pair name, name+"x" in ns: name is a parent
// for networks.
func addParent(t *testing.T, ns *itest.Netns, name string) {
	t.Helper()
	ns.AddVeth(name, name+"x", 0)
	parents = append(parents, name, name+"x")
}

// served reports whether a line of log says request route was served.
func served(log, route string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "request served") && strings.Contains(l, route) {
			return true
		}
	}
	return false
}

// ctrAddr is container c's address on network n as docker inspect shows
// it (IPv4, or IPv6 with v6).
func ctrAddr(t *testing.T, dk *itest.Dockerd, c, n string, v6 bool) netip.Addr {
	t.Helper()
	var nets map[string]struct{ IPAddress, GlobalIPv6Address string }
	dk.JSON(&nets, "inspect", "-f", "{{json .NetworkSettings.Networks}}", c)
	s := nets[n].IPAddress
	if v6 {
		s = nets[n].GlobalIPv6Address
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("docker inspect %s: networks %+v: no address on %s", c, nets, n)
	}
	return a
}

// eth0 is what container c's eth0 holds: `ip -o addr show dev eth0` of the
// family (-4, -6 with scope global).
func eth0(t *testing.T, dk *itest.Dockerd, c, family string) string {
	t.Helper()
	args := []string{"exec", c, "ip", family, "-o", "addr", "show", "dev", "eth0"}
	if family == "-6" {
		args = append(args, "scope", "global")
	}
	return dk.Must(args...)
}

// gatewayNotReserved (issue 24, point 3): networks created with
// --subnet and no --gateway where underlay uses no gateway: an --internal
// network without a parent (underlay makes a dummy link of its own) and
// ipvlan l3 and l3s networks; and, beside them, an ipvlan l2 network,
// whose LAN's router may hold the first address. On engines that ask the
// driver (the current engine) the plugin's log shows
// /NetworkDriver.GwAllocCheck served for each network, and where underlay
// answers "skip" docker network inspect shows no gateway and the first
// container run without --ip gets the pool's first address (.1), the
// second the next; the l2 network keeps .1 reserved (inspect shows it,
// its container gets .2). On engines that do not ask (20.10) the plugin
// is asked nothing, inspect shows the config as given (no gateway) and .1
// is reserved everywhere: the containers get .2 and .3. Every container's
// eth0 holds the address docker inspect shows; where two run (the
// parentless and the l3 network) they reach each other.
func gatewayNotReserved(t *testing.T, ns *itest.Netns, dk *itest.Dockerd, d *itest.Daemon, e engine) {
	start := time.Now()
	asks := e.asksGwAlloc()
	t.Logf("%s asks GwAllocCheck: %v", e, asks)

	cases := []struct {
		name, subnet, parent string
		args                 []string
		// skip: underlay answers GwAllocCheck with SkipIPv4 (it uses no
		// gateway there).
		skip bool
		// ctrs: the containers run (emulation is slow: the cases that
		// only repeat another's answer run one).
		ctrs int
	}{
		{"n24d", "198.18.200.0/24", "", []string{"--internal"}, true, 2},
		{"n24l3", "198.18.201.0/24", "p24l3", []string{"-o", "type=ipvlan", "-o", "ipvlan_mode=l3"}, true, 2},
		{"n24l3s", "198.18.202.0/24", "p24l3s", []string{"-o", "type=ipvlan", "-o", "ipvlan_mode=l3s"}, true, 1},
		{"n24l2", "198.18.203.0/24", "p24l2", []string{"-o", "type=ipvlan"}, false, 1},
	}
	for _, c := range cases {
		if c.parent != "" {
			// All ipvlan links of one parent share its port mode: one
			// parent each.
			addParent(t, ns, c.parent)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failOnEngine(t, e)
			pool := netip.MustParsePrefix(c.subnet)
			first := pool.Addr().Next()
			// The engine reserves the first address unless it asked and
			// underlay said skip.
			reserved := !asks || !c.skip
			want := first
			if reserved {
				want = first.Next()
			}
			mark := len(d.Log())
			args := append([]string{"network", "create", "-d", "underlay", "--subnet", c.subnet}, c.args...)
			if c.parent != "" {
				args = append(args, "-o", "parent="+c.parent)
			}
			dk.Must(append(args, c.name)...)
			t.Cleanup(func() { _, _ = dk.Docker("network", "rm", c.name) })

			if got := served(d.Log()[mark:], "/NetworkDriver.GwAllocCheck"); got != asks {
				t.Errorf("the plugin's log shows /NetworkDriver.GwAllocCheck served for %s: %v; want %v on %s", c.name, got, asks, e)
			}
			var cfg []struct{ Subnet, Gateway string }
			dk.JSON(&cfg, "network", "inspect", "-f", "{{json .IPAM.Config}}", c.name)
			wantGw := ""
			if e.showsPickedGateway() && reserved {
				wantGw = first.String()
			}
			if len(cfg) != 1 || cfg[0].Subnet != c.subnet || cfg[0].Gateway != wantGw {
				t.Errorf("docker network inspect %s: IPAM config %+v; want subnet %s with gateway %q", c.name, cfg, c.subnet, wantGw)
			}

			var addrs []netip.Addr
			names := []string{c.name + "a", c.name + "b"}[:c.ctrs]
			for _, n := range names {
				t.Cleanup(func() { _, _ = dk.Docker("rm", "-f", n) })
				dk.Must("run", "-d", "--stop-timeout", "1", "--name", n, "--network", c.name, "bb:vm", "sleep", "86400")
				a := ctrAddr(t, dk, n, c.name, false)
				if a != want {
					t.Errorf("%s (no --ip) got %s; want %s (gateway reserved: %v)", n, a, want, reserved)
				}
				if out := eth0(t, dk, n, "-4"); !strings.Contains(out, fmt.Sprintf("inet %s/%d ", a, pool.Bits())) {
					t.Errorf("%s's eth0: %q; want %s/%d", n, out, a, pool.Bits())
				}
				t.Logf("%s: %s", n, a)
				addrs = append(addrs, a)
				want = want.Next()
			}
			if len(names) == 2 {
				if err := dk.Ping(names[1], addrs[0].String(), 30*time.Second); err != nil {
					t.Errorf("%s cannot reach %s (%s): %v", names[1], names[0], addrs[0], err)
				}
			}
			dk.Must(append([]string{"rm", "-f"}, names...)...)
			dk.Must("network", "rm", c.name)
		})
	}
	t.Logf("took %s", time.Since(start).Round(100*time.Millisecond))
}

// api sends one Engine API request (path with its version, "/v1.48/…") to
// the engine's socket and decodes a JSON answer into out; it returns the
// status and the daemon's message for an error status.
func api(t *testing.T, dk *itest.Dockerd, method, path string, body, out any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", dk.Socket)
		}}}
	req, err := http.NewRequest(method, "http://docker"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var m struct{ Message string }
		_ = json.Unmarshal(raw, &m)
		return resp.StatusCode, m.Message
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, ""
}

// ipvlanIPv6Only (issue 24, point 4): an ipvlan network created
// through the Engine API with EnableIPv4 false, EnableIPv6 true and the
// one subnet 2001:db8:24::/64 (the 20.10 CLI has no --ipv4=false). On
// engines that know IPv6-only networks (API 1.48+: the current engine,
// asked at 1.48) inspect shows IPv6 only with that one subnet and the
// containers' eth0 has no IPv4; on 20.10 (asked at its 1.41) EnableIPv4
// is ignored: the network is dual stack (an IPv4 pool of the engine's
// default pool beside the IPv6 subnet) and the containers have IPv4 too.
// On both, two containers get distinct addresses of 2001:db8:24::/64 on
// eth0 and reach each other over IPv6; removing the network leaves no link
// behind.
func ipvlanIPv6Only(t *testing.T, ns *itest.Netns, dk *itest.Dockerd, e engine) {
	start := time.Now()
	addParent(t, ns, "p24v6")
	const subnet = "2001:db8:24::/64"
	pool := netip.MustParsePrefix(subnet)
	v := "v1.48"
	if !e.ipv4Optional() {
		v = "v" + e.APIVersion
	}
	t.Logf("%s knows IPv6-only networks: %v; creating the network at API %s", e, e.ipv4Optional(), v)
	var created struct{ ID string }
	if code, msg := api(t, dk, http.MethodPost, "/"+v+"/networks/create", map[string]any{
		"Name": "n24v6", "Driver": "underlay", "EnableIPv4": false, "EnableIPv6": true,
		"IPAM":    map[string]any{"Driver": "default", "Config": []any{map[string]any{"Subnet": subnet}}},
		"Options": map[string]string{"parent": "p24v6", "type": "ipvlan"},
	}, &created); code != http.StatusCreated {
		t.Fatalf("POST /%s/networks/create n24v6: %d %s", v, code, msg)
	}
	t.Cleanup(func() { _, _ = dk.Docker("network", "rm", "n24v6") })

	var ni struct {
		EnableIPv4 *bool // absent below API 1.48
		EnableIPv6 bool
		IPAM       struct {
			Config []struct{ Subnet, Gateway string }
		}
	}
	if code, msg := api(t, dk, http.MethodGet, "/"+v+"/networks/n24v6", nil, &ni); code != http.StatusOK {
		t.Fatalf("GET /%s/networks/n24v6: %d %s", v, code, msg)
	}
	t.Logf("n24v6 (%.12s): EnableIPv6 %v, IPAM %+v", created.ID, ni.EnableIPv6, ni.IPAM.Config)
	var subnets []string
	for _, c := range ni.IPAM.Config {
		subnets = append(subnets, c.Subnet)
	}
	if e.ipv4Optional() {
		if ni.EnableIPv4 == nil || *ni.EnableIPv4 || !ni.EnableIPv6 || len(subnets) != 1 || subnets[0] != subnet {
			t.Errorf("n24v6: EnableIPv4 %v, EnableIPv6 %v, subnets %v; want IPv6 only with the one subnet %s", ni.EnableIPv4, ni.EnableIPv6, subnets, subnet)
		}
	} else {
		v4 := 0
		for _, s := range subnets {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() && netip.MustParsePrefix("198.18.224.0/20").Overlaps(p) {
				v4++
			}
		}
		if !ni.EnableIPv6 || len(subnets) != 2 || v4 != 1 {
			t.Errorf("n24v6 on this engine: EnableIPv6 %v, subnets %v; want %s and an IPv4 pool of the default pool 198.18.224.0/20 (EnableIPv4 ignored)", ni.EnableIPv6, subnets, subnet)
		}
	}

	var addrs []netip.Addr
	for _, n := range []string{"c24v6a", "c24v6b"} {
		t.Cleanup(func() { _, _ = dk.Docker("rm", "-f", n) })
		dk.Must("run", "-d", "--stop-timeout", "1", "--name", n, "--network", "n24v6", "bb:vm", "sleep", "86400")
		a := ctrAddr(t, dk, n, "n24v6", true)
		if !pool.Contains(a) {
			t.Errorf("%s: IPv6 address %s; want one of %s", n, a, subnet)
		}
		if out := eth0(t, dk, n, "-6"); !strings.Contains(out, fmt.Sprintf("inet6 %s/64 ", a)) {
			t.Errorf("%s's eth0 (global IPv6): %q; want %s/64", n, out, a)
		}
		v4 := eth0(t, dk, n, "-4")
		if e.ipv4Optional() && v4 != "" {
			t.Errorf("%s's eth0 has IPv4 %q on an IPv6-only network; want none", n, v4)
		}
		if !e.ipv4Optional() && !strings.Contains(v4, "inet 198.18.") {
			t.Errorf("%s's eth0 IPv4 %q; want an address of the network's IPv4 pool (dual stack on this engine)", n, v4)
		}
		t.Logf("%s: %s (IPv4: %v)", n, a, inets(v4))
		addrs = append(addrs, a)
	}
	if addrs[0] == addrs[1] {
		t.Fatalf("both containers got %s", addrs[0])
	}
	for _, p := range []struct{ from, to string }{{"c24v6a", addrs[1].String()}, {"c24v6b", addrs[0].String()}} {
		if err := dk.Ping(p.from, p.to, 30*time.Second); err != nil {
			t.Errorf("%s cannot reach %s over IPv6: %v", p.from, p.to, err)
		}
	}
	dk.Must("rm", "-f", "c24v6a", "c24v6b")
	dk.Must("network", "rm", "n24v6")
	t.Logf("took %s", time.Since(start).Round(100*time.Millisecond))
}
