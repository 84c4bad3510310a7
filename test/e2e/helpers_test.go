//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/itest"
)

// must runs docker and fails the test on error.
func (e *env) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// within retries f every 250 ms until it succeeds or timeout passes; diag
// runs before the failure.
func within(t *testing.T, timeout time.Duration, what string, f func() error, diag func()) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			diag()
			t.Fatalf("%s: still failing after %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// eventually retries f every 250 ms until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	within(t, timeout, what, f, func() {})
}

// pluginLogWait is how long a test waits for a line of the plugin in
// dockerd's log: the engine relays the plugin's output to its log with a
// delay, so a line the plugin wrote before it answered a request (or
// before the state a test saw) may not be in the log yet.
const pluginLogWait = 10 * time.Second

// waitLogSinceMark waits up to pluginLogWait until the part of dockerd's
// log since the mark satisfies ok; it returns the last part read and
// whether ok held.
func (e *env) waitLogSinceMark(ok func(log string) bool) (string, bool) {
	var log string
	held := itest.WaitFor(pluginLogWait, func() bool {
		log = e.logSinceMark()
		return ok(log)
	})
	return log, held
}

// killPlugin SIGKILLs the plugin's process and waits until dockerd has
// started it again.
func (e *env) killPlugin(t *testing.T) {
	t.Helper()
	old := pluginPids()
	if len(old) != 1 {
		t.Fatalf("plugin processes %v, want one", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "dockerd restarts the killed plugin", func() error {
		if p := pluginPids(); len(p) != 1 || p[0] == old[0] {
			return fmt.Errorf("plugin processes %v (killed %d)", p, old[0])
		}
		return nil
	})
}

// network creates a network and removes it at cleanup; it returns the ID.
func (e *env) network(t *testing.T, name string, args ...string) string {
	t.Helper()
	id := e.must(t, append([]string{"network", "create"}, append(args, name)...)...)
	t.Cleanup(func() { e.removeNetwork(t, name) })
	return id
}

// removeNetwork removes a network if it still exists (for cleanups).
func (e *env) removeNetwork(t *testing.T, name string) {
	if _, err := e.docker("network", "inspect", name); err != nil {
		return
	}
	if _, err := e.docker("network", "rm", name); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// ctr is a container a test started.
type ctr struct{ name, ip, ip6, mac string }

// run starts a container that sleeps, with the given network options
// (--ip, --ip6, --mac-address when set), and removes it at cleanup.
// --stop-timeout 1: busybox sleep as PID 1 ignores SIGTERM, and dockerd
// restarts would otherwise wait 10 s per container.
func (e *env) run(t *testing.T, c ctr, netName string, extra ...string) ctr {
	t.Helper()
	args := []string{"run", "-d", "--stop-timeout", "1", "--name", c.name, "--network", netName}
	if c.ip != "" {
		args = append(args, "--ip", c.ip)
	}
	if c.ip6 != "" {
		args = append(args, "--ip6", c.ip6)
	}
	if c.mac != "" {
		args = append(args, "--mac-address", c.mac)
	}
	args = append(append(args, extra...), imageTag, "sleep", "86400")
	t.Cleanup(func() { _, _ = e.docker("rm", "-f", c.name) })
	e.must(t, args...)
	return c
}

// exec runs a command in a container.
func (e *env) exec(c string, cmd ...string) (string, error) {
	return e.docker(append([]string{"exec", c}, cmd...)...)
}

// ping waits until container from reaches addr (IPv6 addresses need a
// moment for duplicate address detection after a start).
func (e *env) ping(t *testing.T, from, addr string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s pings %s", from, addr), func() error {
		_, err := e.exec(from, "ping", "-c", "1", "-W", "1", addr)
		return err
	})
}

// reaches reports whether container from pings addr within timeout.
func (e *env) reaches(from, addr string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if _, err := e.exec(from, "ping", "-c", "1", "-W", "1", addr); err == nil {
			return true
		}
	}
	return false
}

// pingAll checks that every container reaches every other on each of its
// addresses.
func (e *env) pingAll(t *testing.T, cs ...ctr) {
	t.Helper()
	for _, a := range cs {
		for _, b := range cs {
			if a.name == b.name {
				continue
			}
			for _, addr := range []string{b.ip, b.ip6} {
				if addr != "" {
					e.ping(t, a.name, addr)
				}
			}
		}
	}
}

// waitRunning waits until the containers run.
func (e *env) waitRunning(t *testing.T, timeout time.Duration, names ...string) {
	t.Helper()
	for _, n := range names {
		eventually(t, timeout, n+" running", func() error {
			out, err := e.docker("inspect", "-f", "{{.State.Running}} {{.State.Error}}", n)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(out, "true") {
				return fmt.Errorf("state: %s", out)
			}
			return nil
		})
	}
}

// oneShot runs a new container on a network that pings addr and exits:
// new containers start and reach the others.
func (e *env) oneShot(t *testing.T, netName, ip, addr string) {
	t.Helper()
	args := []string{"run", "--rm", "--network", netName}
	if ip != "" {
		args = append(args, "--ip", ip)
	}
	args = append(args, imageTag, "sh", "-c",
		"for i in 1 2 3 4 5 6 7 8 9 10; do ping -c 1 -W 1 "+addr+" >/dev/null && exit 0; done; exit 1")
	eventually(t, 60*time.Second, "a new container on "+netName+" starts and reaches "+addr, func() error {
		_, err := e.docker(args...)
		return err
	})
}

// nsLinks lists the links of the suite's namespace (where dockerd, the
// plugin and the endpoint links live).
func (e *env) nsLinks(t *testing.T) []string {
	t.Helper()
	l, err := linkNames(nsName)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wantNoLeak fails unless the namespace holds exactly the links it held
// when the suite started, and the host exactly the links it had before.
func (e *env) wantNoLeak(t *testing.T, when string) {
	t.Helper()
	eventually(t, 15*time.Second, "no leaked links "+when, func() error {
		got, err := linkNames(nsName)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(e.nsBase) {
			return fmt.Errorf("links in the engine's namespace %v, want %v", got, e.nsBase)
		}
		host, err := linkNames("")
		if err != nil {
			return err
		}
		if fmt.Sprint(host) != fmt.Sprint(e.hostLinks) {
			return fmt.Errorf("host links %v, before the suite %v", host, e.hostLinks)
		}
		return nil
	})
}

// pluginID returns the full ID of the installed plugin.
func (e *env) pluginID(t *testing.T) string {
	t.Helper()
	return e.must(t, "plugin", "inspect", "-f", "{{.ID}}", plugin)
}

// pluginPids lists the running plugin processes (/underlay serve in the
// suite's namespace).
func pluginPids() []int {
	var out []int
	for _, pid := range ourProcesses() {
		if strings.HasPrefix(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), "/underlay\x00serve") {
			out = append(out, pid)
		}
	}
	return out
}

// ensurePlugin makes sure the plugin is installed and enabled with the
// suite's DOCKER_HOST, whatever an earlier test left; tests call it first
// so that each one can run alone (-run).
func (e *env) ensurePlugin(t *testing.T) {
	t.Helper()
	out, err := e.docker("plugin", "inspect", "-f", "{{.Enabled}}", plugin)
	if err != nil {
		bin, berr := filepath.Abs(filepath.Join(e.root, "bin", "underlay"))
		if berr != nil {
			t.Fatal(berr)
		}
		e.buildPlugin(t, bin, plugin, filepath.Join(dataDir, "plugin-main"))
		out = "false"
	}
	if out != "true" {
		e.must(t, append([]string{"plugin", "set", plugin}, pluginSettings...)...)
		e.must(t, "plugin", "enable", plugin)
	}
	eventually(t, 30*time.Second, "plugin process running", func() error {
		if len(pluginPids()) == 0 {
			return fmt.Errorf("no /underlay serve process in %s", nsName)
		}
		return nil
	})
}

// buildPlugin runs plugin/build.sh BIN NAME into out.
func (e *env) buildPlugin(t *testing.T, bin, name, out string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.root, "plugin", "build.sh"), bin, name)
	cmd.Env = append(e.cliEnv(), "DOCKER="+dockerCLI, "OUT="+out, "FORCE=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plugin/build.sh %s %s: %v\n%s", bin, name, err, b)
	}
}

// disablePlugin disables the plugin without -f, waiting until Docker lets
// go of swarm networks (their node copies linger after network rm).
func (e *env) disablePlugin(t *testing.T) {
	t.Helper()
	eventually(t, 60*time.Second, "docker plugin disable "+plugin, func() error {
		_, err := e.docker("plugin", "disable", plugin)
		return err
	})
}

// goBuild builds the daemon as `make build` does, with another version
// string (docker plugin create refuses a rootfs identical to an installed
// plugin's).
func (e *env) goBuild(t *testing.T, version, out string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/underlay")
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// ifindex returns the index of a link in the suite's namespace.
func ifindex(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command("ip", "-n", nsName, "-o", "link", "show", name).Output()
	if err != nil {
		t.Fatalf("ip -n %s link show %s: %v", nsName, name, err)
	}
	i, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(out), ":", 2)[0]))
	if err != nil {
		t.Fatalf("ifindex of %s: %q", name, out)
	}
	return i
}

// wantRefused fails unless `docker network create -d underlay ARGS NAME`
// is refused with an error naming the holder network on parent and
// saying reason, and leaves no network NAME.
func (e *env) wantRefused(t *testing.T, name, parent, holder, reason string, args ...string) {
	t.Helper()
	out, err := e.docker(append(append([]string{"network", "create", "-d", plugin}, args...), name)...)
	if err == nil {
		e.removeNetwork(t, name)
		t.Fatalf("network %s was created; want it refused naming %s", name, dockerid.Short(holder))
	}
	t.Logf("%s refused: %s", name, out)
	// The form users see on every engine (20.10, 28, current): the CLI's
	// prefix, the remote driver's method, the driver's error.
	if !strings.Contains(out, "Error response from daemon: NetworkDriver.CreateNetwork: conflict: parent "+parent+" is already used by network "+dockerid.Short(holder)) {
		t.Errorf("refusal of %s does not read \"Error response from daemon: NetworkDriver.CreateNetwork: conflict: …\" naming the holder %s on %s: %s", name, dockerid.Short(holder), parent, out)
	}
	if !strings.Contains(out, reason) {
		t.Errorf("refusal of %s does not say %q: %s", name, reason, out)
	}
	if _, err := e.docker("network", "inspect", name); err == nil {
		t.Errorf("refused network %s exists", name)
	}
}

// startInNetns starts a program in the suite's namespace, in a process
// group of its own, with its output in logPath; exited closes when it
// exits.
func startInNetns(t *testing.T, logPath string, args ...string) (cmd *exec.Cmd, exited chan struct{}) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd = exec.Command("nsenter", append([]string{"--net=" + nsPath, "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return cmd, exited
}

// stopProcess sends SIGTERM and waits for exited, killing the process if
// it is still running after timeout; it reports whether it had to.
func stopProcess(cmd *exec.Cmd, exited chan struct{}, timeout time.Duration) (killed bool) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return false
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		return true
	}
}
