//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/internal/itest"
)

// Container-side repair through a real engine (issue 38), with underlay as
// the host's daemon (legacy plugin: the managed plugin cannot open the
// containers' namespaces). The parent is the bridge vrep in the engine's
// namespace, whose port is the DHCP LAN's veth: deleting the bridge
// deletes every container's eth0 and leaves the LAN (dnsmasq, the router)
// as it is; a bridge of that name made again, with the port back, is the
// parent back. A DHCP container and a dual-stack static one get their
// eth0 back (MAC, addresses, default routes) and reach the router again;
// docker network disconnect and docker rm release the re-made interfaces
// and nothing is left.
func TestContainerRepair(t *testing.T) {
	e := need(t)
	const name = "underlay-e2e-repair"
	sock, _ := e.startLegacy(t, name)
	d := e.makeDHCPLAN(t)
	const (
		bridge  = "vrep"
		router6 = "2001:db8:182::1"
		router4 = "198.18.182.1"
	)
	if err := ipCmds(
		[]string{"-n", dhcpNS, "addr", "add", router4 + "/24", "dev", dhcpSrvLink},
		[]string{"-n", dhcpNS, "addr", "add", router6 + "/64", "dev", dhcpSrvLink, "nodad"},
	); err != nil {
		t.Fatal(err)
	}
	makeBridge := repairBridge(t, bridge)

	e.network(t, "nrd", "-d", name, "--ipam-driver", "null", "-o", "parent="+bridge, "-o", "dhcp=true", "-o", "lan_check=false")
	e.network(t, "nrs", "-d", name, "--ipv6", "--subnet", "198.18.182.0/24", "--gateway", router4,
		"--subnet", "2001:db8:182::/64", "--gateway", router6, "-o", "parent="+bridge, "-o", "lan_check=false")
	e.run(t, ctr{name: "crd"}, "nrd")
	e.run(t, ctr{name: "crs", ip: "198.18.182.10", ip6: "2001:db8:182::10"}, "nrs")
	e.waitRunning(t, 30*time.Second, "crd", "crs")
	before := map[string]string{}
	for _, c := range []string{"crd", "crs"} {
		before[c] = e.eth0(t, c)
	}
	e.ping(t, "crd", dhcpRouter)
	e.ping(t, "crs", router4)
	e.ping(t, "crs", router6)
	lease, ok := d.WaitLease(leaseWait, netip.MustParseAddr(addrOf(before["crd"])), func(l itest.DnsmasqLease) bool { return true })
	if !ok {
		t.Fatalf("no dnsmasq lease for crd (%s)", before["crd"])
	}
	// The daemon has read both interfaces in their containers.
	eventually(t, 15*time.Second, "underlay ls shows both containers' eth0", func() error {
		return e.repairs(sock, 0, 2)
	})

	took := e.remakeParent(t, bridge, makeBridge, before, "")
	t.Logf("both containers had eth0 back %s after the parent was made again", took.Round(10*time.Millisecond))
	e.ping(t, "crd", dhcpRouter)
	e.ping(t, "crs", router4)
	e.ping(t, "crs", router6)
	for c, want := range map[string]string{"crd": "default via " + dhcpRouter + " dev eth0", "crs": "default via " + router4 + " dev eth0"} {
		if routes, err := e.exec(c, "ip", "-4", "route"); err != nil || !strings.Contains(routes, want) {
			t.Errorf("routes in %s after the repair:\n%s (%v)\nwant %q", c, routes, err, want)
		}
	}
	if routes, err := e.exec("crs", "ip", "-6", "route"); err != nil || !strings.Contains(routes, "default via "+router6+" dev eth0") {
		t.Errorf("IPv6 routes in crs after the repair:\n%s (%v)", routes, err)
	}
	// The lease is the container's still: same address, same MAC (dnsmasq
	// rewrites its file after its answers: waited for, not read once).
	if now, ok := d.WaitLease(10*time.Second, lease.Addr, func(l itest.DnsmasqLease) bool { return l.MAC == lease.MAC }); !ok {
		t.Errorf("dnsmasq's lease of %s after the repair: %q, was %q", lease.Addr, now.Line, lease.Line)
	}
	eventually(t, 10*time.Second, "underlay ls counts one repair per container", func() error {
		return e.repairs(sock, 1, 2)
	})

	// Docker releases the re-made interfaces: disconnect (the static
	// one), rm (the DHCP one); nothing is left in the engine's namespace
	// but the test's links.
	e.must(t, "network", "disconnect", "nrs", "crs")
	e.must(t, "rm", "-f", "crd", "crs")
	e.must(t, "network", "rm", "nrd", "nrs")
	noEndpointLinks(t)
}

// repairBridge makes the bridge parent of the repair tests, whose port is
// the DHCP LAN's veth, and returns what makes it again after it was
// deleted; it goes at cleanup.
func repairBridge(t *testing.T, bridge string) func() {
	make := func() {
		t.Helper()
		if err := ipCmds(
			[]string{"-n", nsName, "link", "add", bridge, "mtu", "1500", "type", "bridge"},
			[]string{"-n", nsName, "link", "set", dhcpParent, "master", bridge},
			[]string{"-n", nsName, "link", "set", bridge, "up"},
		); err != nil {
			t.Fatal(err)
		}
	}
	make()
	t.Cleanup(func() { _ = exec.Command("ip", "-n", nsName, "link", "del", bridge).Run() })
	return make
}

// Docker keeps working with re-made interfaces across dockerd restarts:
// without live-restore (a container with --restart always stops, its
// re-made interface is released, and it comes back with a new endpoint,
// repaired again at the next deletion of its parent) and with it (the
// container keeps running and its endpoint stays; repaired again after
// the live restart).
func TestContainerRepairAcrossDockerdRestarts(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t) // the restarts below expect the suite's plugin
	const name = "underlay-e2e-repair-restarts"
	sock, _ := e.startLegacy(t, name)
	e.makeDHCPLAN(t)
	const (
		bridge = "vrep"
		router = "198.18.183.1"
	)
	if err := ipCmds([]string{"-n", dhcpNS, "addr", "add", router + "/24", "dev", dhcpSrvLink}); err != nil {
		t.Fatal(err)
	}
	makeBridge := repairBridge(t, bridge)
	live := false
	t.Cleanup(func() {
		_, _ = e.docker("rm", "-f", "crr")
		e.liveRestoreOff(t, live)
	})
	e.network(t, "nrr", "-d", name, "--subnet", "198.18.183.0/24", "--gateway", router, "-o", "parent="+bridge, "-o", "lan_check=false")
	e.run(t, ctr{name: "crr", ip: "198.18.183.10"}, "nrr", "--restart", "always")
	e.waitRunning(t, 30*time.Second, "crr")
	before := e.eth0(t, "crr")
	read := func(repairs int) {
		t.Helper()
		eventually(t, 15*time.Second, fmt.Sprintf("underlay ls shows crr's eth0 with %d repairs", repairs), func() error { return e.repairs(sock, repairs, 1) })
	}
	flap := func(when string) {
		t.Helper()
		read(0)
		e.remakeParent(t, bridge, makeBridge, map[string]string{"crr": before}, " "+when)
		e.ping(t, "crr", router)
		read(1)
	}
	flap("at first")

	// Without live-restore: crr stops with dockerd (its re-made interface
	// released: no link left), and comes back.
	e.restartDockerd(t)
	e.waitRunning(t, 60*time.Second, "crr")
	if got := e.eth0(t, "crr"); got != before {
		t.Fatalf("crr's eth0 after the restart:\n%s\nbefore:\n%s", got, before)
	}
	flap("after a dockerd restart without live-restore")

	// With live-restore: a restart turns it on (crr comes back again),
	// then dockerd restarts under the running container.
	setLiveRestore(t, true)
	e.restartDockerd(t)
	live = true
	e.waitRunning(t, 60*time.Second, "crr")
	var pid int
	if err := e.jsonOut(&pid, "inspect", "-f", "{{json .State.Pid}}", "crr"); err != nil {
		t.Fatal(err)
	}
	e.liveRestartDockerd(t, map[string]int{"crr": pid})
	flap("after a dockerd restart with live-restore")

	e.must(t, "rm", "-f", "crr")
	e.must(t, "network", "rm", "nrr")
	noEndpointLinks(t)
}

// noEndpointLinks waits until no endpoint link (ule…) is left in the
// engine's namespace.
func noEndpointLinks(t *testing.T) {
	t.Helper()
	eventually(t, 15*time.Second, "nothing of underlay's left", func() error {
		links, err := linkNames(nsName)
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l, "ule") {
				return fmt.Errorf("endpoint link %s left (links %v)", l, links)
			}
		}
		return nil
	})
}

// The repair plugin (plugin/config-repair.json, make plugin-repair): the
// managed plugin with CAP_SYS_ADMIN and dockerd's netns directory mounted
// (its source set to this engine's exec-root) repairs a container's eth0
// as the host daemon does.
func TestContainerRepairPlugin(t *testing.T) {
	e := need(t)
	const (
		name   = "underlay-e2e-repair-plugin:latest"
		bridge = "vrep"
		router = "198.18.184.1"
	)
	sock := e.repairPlugin(t, name)

	e.makeDHCPLAN(t)
	if err := ipCmds([]string{"-n", dhcpNS, "addr", "add", router + "/24", "dev", dhcpSrvLink}); err != nil {
		t.Fatal(err)
	}
	makeBridge := repairBridge(t, bridge)
	e.network(t, "nrp", "-d", name, "--subnet", "198.18.184.0/24", "--gateway", router, "-o", "parent="+bridge, "-o", "lan_check=false")
	e.run(t, ctr{name: "crp", ip: "198.18.184.10"}, "nrp")
	e.waitRunning(t, 30*time.Second, "crp")
	before := e.eth0(t, "crp")
	eventually(t, 15*time.Second, "the repair plugin read crp's eth0", func() error { return e.repairs(sock, 0, 1) })
	e.remakeParent(t, bridge, makeBridge, map[string]string{"crp": before}, "")
	e.ping(t, "crp", router)
	eventually(t, 10*time.Second, "the repair plugin counts the repair", func() error { return e.repairs(sock, 1, 1) })

	// The plugin's /run mount holds the namespaces' files (rbind): after
	// a dockerd crash and the container's end, none of them may be kept
	// alive by it (rslave: dockerd's unmounts reach it).
	e.crashDockerd(t)
	e.must(t, "rm", "-f", "crp")
	eventually(t, 30*time.Second, "no namespace holds crp's address", func() error {
		held, err := netnsHolders("198.18.184.10")
		if err != nil {
			return err
		}
		if len(held) > 0 {
			return fmt.Errorf("namespaces with 198.18.184.10: %v", held)
		}
		return nil
	})
	e.must(t, "network", "rm", "nrp")
	noEndpointLinks(t)
}

// repairPlugin builds the repair plugin (plugin/config-repair.json) as
// name, with the suite's settings and its netns mount on this engine's
// exec-root, enables it until the test ends, and returns its socket.
func (e *env) repairPlugin(t *testing.T, name string) string {
	t.Helper()
	netnsDir := filepath.Join(execRoot, "netns")
	sharedMount(t, netnsDir)
	bin, err := filepath.Abs(filepath.Join(e.root, "bin", "underlay"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(e.root, "plugin", "build.sh"), bin, name)
	cmd.Env = append(e.cliEnv(), "DOCKER="+dockerCLI, "OUT="+filepath.Join(dataDir, "plugin-repair"), "FORCE=1",
		"CONFIG="+filepath.Join(e.root, "plugin", "config-repair.json"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plugin/build.sh (repair): %v\n%s", err, b)
	}
	t.Cleanup(func() { _, _ = e.docker("plugin", "rm", "-f", name) })
	// Its /run mount is the host's /run: dockerd's exec-root netns as the
	// plugin sees it.
	e.must(t, append([]string{"plugin", "set", name, "SANDBOX_DIR=" + filepath.Join("/host", netnsDir)}, pluginSettings...)...)
	e.must(t, "plugin", "enable", name)
	id := e.must(t, "plugin", "inspect", "-f", "{{.Id}}", name)
	return filepath.Join("/run/docker/plugins", id, "underlay.sock")
}

// sharedMount makes dir a shared mount of itself (rbind: what is mounted
// below it stays), as dockerd's exec-root is on a systemd host (/ and
// /run shared): the namespaces dockerd mounts there later then propagate
// into a plugin's rslave mount of it. This machine's / is private. The
// mount goes at cleanup, after the test's containers.
func sharedMount(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Only over no mounted namespace: one mounted now would be copied into
	// the bind, and its container's stop would unmount the copy only. A
	// removed container's file stays, unmounted, until dockerd collects it
	// (Engine 20.10: every 60 s): nothing is copied of it.
	var mounted []string
	for _, m := range mountsUnder(dir) {
		if m != dir {
			mounted = append(mounted, m)
		}
	}
	if len(mounted) != 0 {
		t.Fatalf("%s holds %d mounted namespaces of running containers (%v): the shared mount wants none", dir, len(mounted), mounted)
	}
	if out, err := exec.Command("mount", "--rbind", dir, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --rbind %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	if out, err := exec.Command("mount", "--make-rshared", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount --make-rshared %s: %v: %s", dir, err, out)
	}
}

// remakeParent deletes the parent bridge, waits until each container of
// before has lost its eth0 with it, makes the bridge again (remake) and
// waits until each has its eth0 again as before (eth0Now); it returns the
// time from the bridge's return to the last eth0's. when ends the waits'
// names.
func (e *env) remakeParent(t *testing.T, bridge string, remake func(), before map[string]string, when string) time.Duration {
	t.Helper()
	if err := ipCmds([]string{"-n", nsName, "link", "del", bridge}); err != nil {
		t.Fatal(err)
	}
	for c := range before {
		eventually(t, 10*time.Second, c+" lost eth0 with its parent"+when, func() error {
			if out, err := e.exec(c, "ip", "link", "show", "eth0"); err == nil {
				return fmt.Errorf("still there: %s", out)
			}
			return nil
		})
	}
	start := time.Now()
	remake()
	for c, want := range before {
		eventually(t, 15*time.Second, c+" has eth0 again as before"+when, func() error {
			if got := e.eth0Now(c); got != want {
				return fmt.Errorf("eth0 now:\n%s\nbefore:\n%s", got, want)
			}
			return nil
		})
	}
	return time.Since(start)
}

// startLegacy runs `underlay serve` as a host process of the engine's
// namespace with its socket in /run/docker/plugins under name, until the
// test ends (or stop); it returns the socket and stop (SIGTERM, waited
// for; its log is shown if the test failed).
func (e *env) startLegacy(t *testing.T, name string) (sock string, stop func()) {
	t.Helper()
	sock = "/run/docker/plugins/" + name + ".sock"
	bin, err := filepath.Abs(filepath.Join(e.root, "bin", "underlay"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dataDir, name+".log")
	cmd, exited := startInNetns(t, logPath, bin, "serve", "--socket", sock,
		"--state", filepath.Join(dataDir, name, "underlay.db"), "--docker-host", "unix://"+sockPath)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopProcess(cmd, exited, 30*time.Second)
			// The daemon leaves its socket's lock file (a file nobody
			// holds locks nothing); the name is the suite's.
			_ = os.Remove(sock + ".lock")
			if t.Failed() {
				t.Logf("%s log:\n%s", name, itest.TailLines(readFile(logPath), 60))
			}
		})
	}
	t.Cleanup(stop)
	eventually(t, 10*time.Second, "socket "+sock, func() error {
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("%v; log: %s", err, readFile(logPath))
		}
		return nil
	})
	return sock, stop
}

// eth0 is what a container's eth0 is (ip addr show: MAC and addresses,
// without the lifetimes that change); it fails the test without one.
func (e *env) eth0(t *testing.T, c string) string {
	t.Helper()
	var got string
	eventually(t, 30*time.Second, c+" has eth0 with its addresses", func() error {
		if got = e.eth0Now(c); !strings.Contains(got, "inet ") {
			return fmt.Errorf("eth0: %q", got)
		}
		return nil
	})
	return got
}

func (e *env) eth0Now(c string) string {
	out, err := e.exec(c, "ip", "addr", "show", "eth0")
	if err != nil {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && (f[0] == "link/ether" || f[0] == "inet" || f[0] == "inet6") && !strings.HasPrefix(f[1], "fe80:"):
			keep = append(keep, f[0]+" "+f[1])
		case len(f) >= 2 && strings.HasSuffix(f[1], ":") && strings.Contains(l, "mtu"):
			keep = append(keep, strings.Fields(strings.SplitN(l, "mtu", 2)[1])[0])
		}
	}
	return strings.Join(keep, "\n")
}

// addrOf is the IPv4 address (without its length) in eth0's summary.
func addrOf(eth0 string) string {
	for _, l := range strings.Split(eth0, "\n") {
		if a, ok := strings.CutPrefix(l, "inet "); ok {
			return strings.SplitN(a, "/", 2)[0]
		}
	}
	return ""
}

// repairs checks that underlay ls (the daemon at sock) shows n endpoints
// whose interface was read, each made again want times.
func (e *env) repairs(sock string, want, n int) error {
	bin := filepath.Join(e.root, "bin", "underlay")
	out, err := exec.Command(bin, "ls", "--socket", sock, "--docker-host", "unix://"+sockPath, "--json").Output()
	if err != nil {
		return fmt.Errorf("underlay ls: %w", err)
	}
	var l control.Listing
	if err := json.Unmarshal(out, &l); err != nil {
		return err
	}
	var got []string
	count := 0
	for _, nw := range l.Networks {
		for _, ep := range nw.Endpoints {
			got = append(got, fmt.Sprintf("%s:%s/%d", ep.ID[:12], ep.Interface, ep.Repairs))
			if ep.Interface == "eth0" && ep.Repairs == want {
				count++
			}
		}
	}
	if count != n {
		return fmt.Errorf("endpoints (interface/repairs): %v; want %d with eth0/%d", got, n, want)
	}
	return nil
}
