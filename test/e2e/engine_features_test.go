//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// What current engines offer remote drivers (issue 24), on each engine as
// it behaves: interface names (com.docker.network.endpoint.ifname), no
// gateway address reserved where underlay uses none (GwAllocChecker), and
// IPv6-only networks (--ipv4=false). Each difference is an engineInfo
// method (engine_test.go); on an engine without the feature the test
// checks what that engine does instead.
//
// Parents: vp14 (ifname), vp15 and vp17 (gateway), vp16 (IPv6 only). This
// host's kernel has neither the ipvlan nor the dummy module: ipvlan l3 and
// internal networks without a parent (a dummy link of their own) cannot
// run here, nor ipvlan IPv6-only networks. The VM's Docker suite runs them
// through a real engine, 20.10 and the current one alike
// (test/vmdocker/engines_test.go, TestDockerEngine: `make test-vm-docker`,
// `make test-vm-docker-current`); the driver's own tests check its
// GwAllocCheck answers at the protocol level.

// ifnameOpt is the endpoint driver option naming the container's
// interface.
const ifnameOpt = "com.docker.network.endpoint.ifname"

// TestEndpointIfname: `docker run --network name=N,driver-opt=
// com.docker.network.endpoint.ifname=lan7` gives the container an
// interface named lan7 (its addresses and routes on it) on engines that
// honour Join's DstName, eth0 on the others; a name that cannot be a
// container's interface (lo, 16 bytes, with /) is refused on every engine
// with a message naming it and the option.
func TestEndpointIfname(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	e.network(t, "n10i", "-d", plugin, "--subnet", "198.18.14.0/24", "--gateway", "198.18.14.1", "-o", "parent=vp14")
	want := "eth0"
	if engine.honoursIfname() {
		want = "lan7"
	}
	t.Logf("%s: the container's interface must be %s", engine, want)
	e.must(t, "run", "-d", "--stop-timeout", "1", "--name", "c10i", "--ip", "198.18.14.10",
		"--network", "name=n10i,driver-opt="+ifnameOpt+"=lan7", imageTag, "sleep", "86400")
	t.Cleanup(func() { _, _ = e.docker("rm", "-f", "c10i") })
	links, err := e.exec("c10i", "ls", "/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(links), " "); got != want+" lo" {
		t.Errorf("the container's interfaces are %q; want %s and lo", got, want)
	}
	if out, _ := e.exec("c10i", "ip", "-4", "-o", "addr", "show", "dev", want); !strings.Contains(out, "inet 198.18.14.10/24 ") {
		t.Errorf("%s: %q, want 198.18.14.10/24 on it", want, out)
	}
	if out, _ := e.exec("c10i", "ip", "-4", "route", "show", "default"); !strings.Contains(out, "via 198.18.14.1 dev "+want) {
		t.Errorf("default route %q, want via 198.18.14.1 dev %s", out, want)
	}
	// The interface works: a second container (eth0) and c10i reach each
	// other.
	e.run(t, ctr{name: "c10j", ip: "198.18.14.11"}, "n10i")
	e.ping(t, "c10j", "198.18.14.10")
	e.ping(t, "c10i", "198.18.14.11")

	for _, bad := range []string{"lo", "abcdefghijklmnop", "lan/7"} {
		name := "c10bad"
		out, err := e.docker("run", "-d", "--stop-timeout", "1", "--name", name,
			"--network", "name=n10i,driver-opt="+ifnameOpt+"="+bad, imageTag, "sleep", "86400")
		_, _ = e.docker("rm", "-f", name)
		if err == nil {
			t.Errorf("%s=%s: the container started; want it refused", ifnameOpt, bad)
			continue
		}
		t.Logf("%s=%s refused: %s", ifnameOpt, bad, out)
		if !strings.Contains(out, `"`+bad+`"`) || !strings.Contains(out, ifnameOpt) {
			t.Errorf("%s=%s: the refusal does not name the option and the name: %s", ifnameOpt, bad, out)
		}
	}
	e.must(t, "rm", "-f", "c10i", "c10j")
	e.must(t, "network", "rm", "n10i")
	e.wantNoLeak(t, "after the network was removed")
}

// gatewayOf is a network's IPv4 gateway as docker network inspect shows
// it ("" for none).
func (e *env) gatewayOf(t *testing.T, name string) string {
	t.Helper()
	var ni []netInspect
	if err := e.jsonOut(&ni, "network", "inspect", name); err != nil {
		t.Fatal(err)
	}
	for _, c := range ni[0].IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil && p.Addr().Is4() {
			return c.Gateway
		}
	}
	t.Fatalf("network %s has no IPv4 pool: %+v", name, ni[0].IPAM)
	return ""
}

// TestGatewayNotReserved: networks created without --gateway. Where
// underlay uses a gateway or a router of the LAN may hold the address (a
// plain macvlan network, an --internal network on a parent) Docker
// reserves the subnet's first address on every engine: --ip .1 is
// refused. Where underlay uses none (a network without a parent, on a
// dummy link of its own; ipvlan l3) engines that ask the driver
// (GwAllocCheck, which the plugin's log shows served) reserve nothing:
// docker network inspect shows no gateway and a container may have the
// first address; engines that do not ask reserve it there too. Those
// networks need the kernel's dummy and ipvlan links: on a kernel without
// them (this CI host has neither) the test says so and names where they
// are proven: the VM's Docker suite on both engines
// (test/vmdocker/engines_test.go, TestDockerEngine/GatewayNotReserved:
// no parent, ipvlan l3 and l3s), and the driver's own tests at the
// protocol level (driver/engines_test.go).
func TestGatewayNotReserved(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	asks := engine.asksGwAlloc()
	t.Logf("%s asks GwAllocCheck: %v", engine, asks)

	// reserved checks, for a network just created, that GwAllocCheck was
	// asked where the engine asks, and whether the first address is
	// reserved.
	reserved := func(t *testing.T, name, first string, want bool) {
		t.Helper()
		// The plugin's line reaches dockerd's log through the engine's
		// relay, after network create returns: awaited where it is due.
		var served bool
		e.waitLogSinceMark(func(log string) bool {
			served = logHas(log, "request served", "/NetworkDriver.GwAllocCheck")
			return served == asks
		})
		if served != asks {
			t.Errorf("%s: the plugin's log shows GwAllocCheck served: %v; want %v on this engine", name, served, asks)
		}
		gw := e.gatewayOf(t, name)
		switch {
		case !engine.showsPickedGateway() && gw != "":
			t.Errorf("%s: docker network inspect shows gateway %q; this engine shows the IPAM config as given (no --gateway)", name, gw)
		case engine.showsPickedGateway() && want && gw != first:
			t.Errorf("%s: docker network inspect shows gateway %q; want %s reserved", name, gw, first)
		case engine.showsPickedGateway() && !want && gw != "":
			t.Errorf("%s: docker network inspect shows gateway %q; want none reserved (GwAllocCheck)", name, gw)
		}
		c := "c" + name
		out, err := e.docker("run", "-d", "--stop-timeout", "1", "--name", c, "--network", name, "--ip", first, imageTag, "sleep", "86400")
		t.Cleanup(func() { _, _ = e.docker("rm", "-f", c) })
		switch {
		case want && err == nil:
			t.Errorf("%s: a container got --ip %s, the reserved gateway address", name, first)
		case want:
			t.Logf("%s: --ip %s refused, as it is reserved: %s", name, first, out)
		case err != nil:
			t.Errorf("%s: a container with --ip %s (the first address, no gateway reserved): %v", name, first, err)
		default:
			if a, err := e.eth0v4(c); err != nil || a.Addr().String() != first {
				t.Errorf("%s: eth0 %v (%v), want %s", c, a, err, first)
			}
			// An automatic address of the same network beside it.
			e.run(t, ctr{name: c + "b"}, name)
			e.ping(t, c+"b", first)
			e.must(t, "rm", "-f", c+"b")
		}
		_, _ = e.docker("rm", "-f", c)
		e.must(t, "network", "rm", name)
	}

	e.markLog()
	e.network(t, "n10m", "-d", plugin, "--subnet", "198.18.16.0/24", "-o", "parent=vp15")
	reserved(t, "n10m", "198.18.16.1", true)
	e.markLog()
	e.network(t, "n10g", "-d", plugin, "--internal", "--subnet", "198.18.15.0/24", "-o", "parent=vp15")
	reserved(t, "n10g", "198.18.15.1", true)

	for _, c := range []struct {
		name, kind, subnet, first string
		args                      []string
	}{
		{"n10d", "dummy", "198.18.17.0/24", "198.18.17.1", []string{"--internal"}},
		{"n10l3", "ipvlan", "198.18.18.0/24", "198.18.18.1", []string{"-o", "parent=vp17", "-o", "ipvlan_mode=l3"}},
	} {
		if err := kernelMakes(c.kind); err != nil {
			t.Logf("not run on this host: %s (%s links: %v); proven through Docker in the VM on both engines "+
				"(test/vmdocker TestDockerEngine/GatewayNotReserved: make test-vm-docker, make test-vm-docker-current), "+
				"and at the protocol level by the driver's own tests", c.name, c.kind, err)
			continue
		}
		e.markLog()
		e.network(t, c.name, append([]string{"-d", plugin, "--subnet", c.subnet}, c.args...)...)
		reserved(t, c.name, c.first, !asks)
	}
	e.wantNoLeak(t, "after the networks were removed")
}

// kernelMakes reports whether the kernel makes links of a kind (dummy,
// ipvlan) in the suite's namespace, by making one and deleting it.
func kernelMakes(kind string) error {
	args := []string{"link", "add", "e2eprobe0"}
	if kind == "ipvlan" {
		args = append(args, "link", "ctl0")
	}
	if _, err := nsIP(append(args, "type", kind)...); err != nil {
		return err
	}
	_, err := nsIP("link", "del", "e2eprobe0")
	return err
}

// apiCreateNetwork creates a network through the Engine API (API version
// v), for what the 20.10 client cannot ask (EnableIPv4 false): it returns
// the network's ID, or the daemon's error as the CLI prints it.
func (e *env) apiCreateNetwork(t *testing.T, v string, body map[string]any) (string, error) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sockPath)
		}}}
	resp, err := c.Post("http://docker/"+v+"/networks/create", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r struct{ ID, Message string }
	_ = json.Unmarshal(raw, &r)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("Error response from daemon: %s (%s)", r.Message, resp.Status)
	}
	if name, _ := body["Name"].(string); name != "" {
		t.Cleanup(func() { e.removeNetwork(t, name) })
	}
	return r.ID, nil
}

// TestIPv6Only: an IPv6-only network (--ipv4=false --ipv6 --subnet
// 2001:db8:16::/64; the Engine API's EnableIPv4 false) on engines that
// know it: containers get IPv6 addresses only and reach each other, and
// host_address (an IPv4 address of the network's) is refused clearly. On
// engines that do not (20.10), EnableIPv4 is ignored and the network is
// dual stack.
func TestIPv6Only(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	body := func(name string, opts map[string]string, aux map[string]string) map[string]any {
		cfg := map[string]any{"Subnet": "2001:db8:16::/64"}
		if aux != nil {
			cfg["AuxiliaryAddresses"] = aux
		}
		return map[string]any{"Name": name, "Driver": plugin, "EnableIPv4": false, "EnableIPv6": true,
			"IPAM": map[string]any{"Driver": "default", "Config": []any{cfg}}, "Options": opts}
	}
	if !engine.ipv4Optional() {
		t.Logf("%s has no IPv6-only networks (EnableIPv4 is API 1.48): EnableIPv4 false must be ignored", engine)
		if _, err := e.apiCreateNetwork(t, "v"+engine.APIVersion, body("n10v6", map[string]string{"parent": "vp16"}, nil)); err != nil {
			t.Fatal(err)
		}
		var ni []netInspect
		if err := e.jsonOut(&ni, "network", "inspect", "n10v6"); err != nil {
			t.Fatal(err)
		}
		if len(ni[0].IPAM.Config) != 2 {
			t.Errorf("n10v6 on this engine: IPAM %+v; want an IPv4 pool beside 2001:db8:16::/64", ni[0].IPAM)
		}
		e.must(t, "network", "rm", "n10v6")
		e.wantNoLeak(t, "after the network was removed")
		return
	}
	if _, err := e.apiCreateNetwork(t, "v1.48", body("n10v6", map[string]string{"parent": "vp16"}, nil)); err != nil {
		t.Fatal(err)
	}
	var ni []struct {
		EnableIPv4, EnableIPv6 bool
		IPAM                   struct {
			Config []struct{ Subnet, Gateway string }
		}
	}
	if err := e.jsonOut(&ni, "network", "inspect", "n10v6"); err != nil {
		t.Fatal(err)
	}
	t.Logf("n10v6: %+v", ni[0])
	if ni[0].EnableIPv4 || !ni[0].EnableIPv6 || len(ni[0].IPAM.Config) != 1 || ni[0].IPAM.Config[0].Subnet != "2001:db8:16::/64" {
		t.Errorf("n10v6: %+v; want IPv6 only, with the one subnet 2001:db8:16::/64", ni[0])
	}
	a := e.run(t, ctr{name: "c10v6a", ip6: "2001:db8:16::10"}, "n10v6")
	b := e.run(t, ctr{name: "c10v6b"}, "n10v6")
	for _, c := range []string{a.name, b.name} {
		if out, err := e.exec(c, "ip", "-4", "-o", "addr", "show", "dev", "eth0"); err != nil || out != "" {
			t.Errorf("%s: IPv4 on eth0 %q (%v); want none", c, out, err)
		}
	}
	out, err := e.exec(b.name, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global")
	if err != nil || !strings.Contains(out, "inet6 2001:db8:16:") {
		t.Fatalf("%s: global IPv6 on eth0 %q (%v); want an address of 2001:db8:16::/64", b.name, out, err)
	}
	if out, _ := e.exec(a.name, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"); !strings.Contains(out, "inet6 2001:db8:16::10/64 ") {
		t.Errorf("%s: %q, want 2001:db8:16::10/64 (--ip6)", a.name, out)
	}
	b6 := strings.Split(strings.Fields(out[strings.Index(out, "inet6 "):])[1], "/")[0]
	e.ping(t, b.name, "2001:db8:16::10")
	e.ping(t, a.name, b6)
	e.must(t, "rm", "-f", a.name, b.name)
	e.must(t, "network", "rm", "n10v6")

	// host_address is an IPv4 address of the network's: an IPv6-only
	// network has none to give, whatever is asked (an IPv4 address cannot
	// be reserved with --aux-address there: Docker refuses it first).
	for _, ha := range []struct {
		addr string
		aux  map[string]string
	}{{"198.18.16.2", nil}, {"2001:db8:16::2", map[string]string{"host": "2001:db8:16::2"}}} {
		_, err := e.apiCreateNetwork(t, "v1.48", body("n10v6ha", map[string]string{"parent": "vp16", "host_address": ha.addr}, ha.aux))
		if err == nil {
			t.Errorf("IPv6-only network with host_address=%s was created; want it refused", ha.addr)
			e.removeNetwork(t, "n10v6ha")
			continue
		}
		t.Logf("host_address=%s on an IPv6-only network refused: %v", ha.addr, err)
		if !strings.Contains(err.Error(), "host_address") {
			t.Errorf("host_address=%s: the refusal does not name host_address: %v", ha.addr, err)
		}
		if _, err := e.docker("network", "inspect", "n10v6ha"); err == nil {
			t.Errorf("refused network n10v6ha exists")
		}
	}
	e.wantNoLeak(t, "after the networks were removed")
}
