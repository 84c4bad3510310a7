//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// registry is Debian's docker-registry, run inside the suite's namespace
// so that 127.0.0.1 is the engine's loopback (trusted without TLS) and the
// host's ports stay untouched.
const registry = "127.0.0.1:5000"

// `make plugin` creates PLUGIN on DOCKER_HOST; an existing plugin of that
// name is kept unless FORCE=1.
func TestMakePlugin(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	id := e.pluginID(t)
	out, err := e.make("plugin", "PLUGIN="+plugin)
	if err == nil || !strings.Contains(out, "already exists") {
		t.Errorf("make plugin over an existing %s: %v\n%s\nwant a refusal naming FORCE=1", plugin, err, out)
	}
	if now := e.pluginID(t); now != id || e.must(t, "plugin", "inspect", "-f", "{{.Enabled}}", plugin) != "true" {
		t.Fatalf("the refused make plugin changed the installed plugin (%s, was %s)", now, id)
	}
	if out, err := e.make("plugin", "PLUGIN="+plugin, "FORCE=1"); err != nil {
		t.Fatalf("make plugin FORCE=1: %v\n%s", err, out)
	}
	if now := e.pluginID(t); now == id {
		t.Errorf("make plugin FORCE=1 did not replace the plugin")
	}
	e.ensurePlugin(t)
	e.network(t, "nm", "-d", plugin, "--subnet", "198.18.9.0/24", "-o", "parent=vp9")
	e.run(t, ctr{name: "cm", ip: "198.18.9.10"}, "nm")
	e.oneShot(t, "nm", "198.18.9.11", "198.18.9.10")
	e.must(t, "rm", "-f", "cm")
	e.must(t, "network", "rm", "nm")
}

// make runs make in the module root against the suite's engine.
func (e *env) make(args ...string) (string, error) {
	cmd := exec.Command("make", append([]string{"-C", e.root}, args...)...)
	cmd.Env = append(e.cliEnv(), "DOCKER="+dockerCLI)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Point 7: `docker plugin install` as a user runs it, from a registry, then
// `docker plugin upgrade` to a v2 that keeps the networks and the state.
func TestPluginInstallAndUpgrade(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	e.startRegistry(t)

	// The maintainer's side: build, create, push.
	publish := func(version string) string {
		ref := registry + "/underlay:" + version
		bin := e.goBuild(t, "e2e-"+version, filepath.Join(dataDir, "build-"+version, "underlay"))
		e.buildPlugin(t, bin, ref, filepath.Join(dataDir, "plugin-"+version))
		e.must(t, "plugin", "push", ref)
		e.must(t, "plugin", "rm", ref)
		return ref
	}
	v1 := publish("v1")

	// The user's side: install under the name underlay (the plugin from
	// make plugin goes first), telling it where the Docker API socket is.
	e.must(t, "plugin", "rm", "-f", plugin)
	e.must(t, "plugin", "install", "--grant-all-permissions", "--alias", "underlay", v1, "DOCKER_HOST="+pluginDockerHost, "LOG_LEVEL="+pluginLogLevel, "DEFAULT_ADDRESS_POOLS="+pluginAddressPools)
	if out := e.must(t, "plugin", "inspect", "-f", "{{.Enabled}} {{.PluginReference}}", plugin); out != "true "+v1 {
		t.Fatalf("installed plugin: %s, want enabled from %s", out, v1)
	}
	e.wantLogLine(t, "starting underlay", "version=e2e-v1")

	e.network(t, "n7", "-d", plugin, "--ipv6", "--subnet", "198.18.8.0/24", "--subnet", "2001:db8:8::/64", "-o", "parent=vp8")
	a := e.run(t, ctr{name: "c7a", ip: "198.18.8.10", ip6: "2001:db8:8::10"}, "n7", "--restart=always")
	b := e.run(t, ctr{name: "c7b", ip: "198.18.8.11", ip6: "2001:db8:8::11"}, "n7", "--restart=always")
	e.pingAll(t, a, b)
	n7 := e.must(t, "network", "inspect", "-f", "{{.Id}}", "n7")

	v2 := publish("v2")
	e.markLog()
	e.must(t, "plugin", "disable", "-f", plugin)
	e.must(t, "plugin", "upgrade", "--grant-all-permissions", "--skip-remote-check", plugin, v2)
	if env := e.must(t, "plugin", "inspect", "-f", "{{.Settings.Env}}", plugin); !strings.Contains(env, "DOCKER_HOST="+pluginDockerHost) {
		t.Errorf("after the upgrade the plugin's env is %s; want DOCKER_HOST kept", env)
	}
	e.must(t, "plugin", "enable", plugin)
	if out := e.must(t, "plugin", "inspect", "-f", "{{.Enabled}} {{.PluginReference}}", plugin); out != "true "+v2 {
		t.Fatalf("upgraded plugin: %s, want enabled from %s", out, v2)
	}
	e.wantLogLine(t, "starting underlay", "version=e2e-v2")

	// The network and its containers carry on; the state file kept n7: a
	// passthru network on its parent is refused, naming it.
	e.waitRunning(t, 30*time.Second, a.name, b.name)
	e.pingAll(t, a, b)
	e.oneShot(t, "n7", "198.18.8.20", a.ip)
	e.wantRefused(t, "n7pt", "vp8", n7, "exclusively", "--subnet", "198.18.80.0/24", "-o", "parent=vp8", "-o", "macvlan_mode=passthru")
	e.must(t, "rm", "-f", a.name, b.name)
	e.must(t, "network", "rm", "n7")
	e.wantNoLeak(t, "after the network was removed")
}

// The legacy mode of plugin/underlay.service: `underlay serve` as a host
// process with its socket in /run/docker/plugins (here in the suite's
// namespace, under a name of its own, with state in the suite's dir).
func TestLegacyMode(t *testing.T) {
	e := need(t)
	const name = "underlay-e2e-legacy"
	sock, stop := e.startLegacy(t, name)
	e.network(t, "nl", "-d", name, "--subnet", "198.18.9.0/24", "-o", "parent=vp9")
	a := e.run(t, ctr{name: "cla", ip: "198.18.9.10"}, "nl")
	b := e.run(t, ctr{name: "clb", ip: "198.18.9.11"}, "nl")
	e.pingAll(t, a, b)
	e.must(t, "rm", "-f", a.name, b.name)
	e.must(t, "network", "rm", "nl")
	stop()
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("%s left after SIGTERM", sock)
	}
	e.wantNoLeak(t, "after the legacy daemon stopped")
}

// startRegistry runs docker-registry on 127.0.0.1:5000 in the namespace,
// with storage in the suite's dir, until the test ends.
func (e *env) startRegistry(t *testing.T) {
	t.Helper()
	dir := filepath.Join(dataDir, "registry")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "data"), registry)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, exited := startInNetns(t, filepath.Join(dir, "registry.log"), "docker-registry", "serve", cfg)
	e.mu.Lock()
	e.registry, e.registryExited = cmd, exited
	e.mu.Unlock()
	t.Cleanup(e.stopRegistry)
	eventually(t, 30*time.Second, "registry answers on "+registry, func() error {
		select {
		case <-exited:
			t.Fatalf("docker-registry exited: %s", readFile(filepath.Join(dir, "registry.log")))
		default:
		}
		return exec.Command("nsenter", "--net="+nsPath, "--", "busybox", "wget", "-q", "-O", "/dev/null", "http://"+registry+"/v2/").Run()
	})
}

// stopRegistry stops the registry if it runs.
func (e *env) stopRegistry() {
	e.mu.Lock()
	cmd, exited := e.registry, e.registryExited
	e.registry = nil
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	stopProcess(cmd, exited, 10*time.Second)
}

// wantLogLine waits until a line of dockerd's log since the mark (the
// plugin's output) holds every part.
func (e *env) wantLogLine(t *testing.T, parts ...string) {
	t.Helper()
	eventually(t, 15*time.Second, fmt.Sprintf("a plugin log line with %q", parts), func() error {
		if !logHas(e.logSinceMark(), parts...) {
			return fmt.Errorf("not in dockerd's log")
		}
		return nil
	})
}

// logHas reports whether one line of log holds every part.
func logHas(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
