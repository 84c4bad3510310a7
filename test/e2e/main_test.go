//go:build e2e

// Package e2e proves every path a user takes through a real Docker engine
// (20.10 from Debian's docker.io): the managed plugin built by `make plugin`,
// networks and containers, restarts, the stale-holder check against the real
// Docker API, swarm on one node, `docker plugin install` from a registry,
// `docker plugin upgrade`, and teardown.
//
// The suite runs a dockerd of its own inside a network namespace of its own
// (nsenter --net, not `ip netns exec`, which breaks dockerd), so every link
// the plugin and the containers create lives there and the host stays
// untouched; its API socket is under /run so the plugin reaches it through
// its read-only /run mount (/host/run). Everything it starts and creates is
// found again by fixed paths, the namespace and the cgroup parent, so a
// later run also cleans up after one that was killed.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	nsName   = "underlay-e2e"
	nsPath   = "/run/netns/" + nsName
	runDir   = "/run/underlay-e2e" // API socket, pid file, exec root (short paths: unix sockets)
	sockPath = runDir + "/docker.sock"
	pidPath  = runDir + "/docker.pid"
	execRoot = runDir + "/x"
	// pluginDockerHost is the suite's API socket as the plugin sees it
	// through its /run mount.
	pluginDockerHost = "unix:///host/run/underlay-e2e/docker.sock"
	// pluginLogLevel is debug: every request the plugin serves is in
	// dockerd's log, which a failed test prints.
	pluginLogLevel = "debug"
	cgroupParent   = "/underlay-e2e"
	// plugin is the managed plugin's name, and the driver name networks use
	// (engine 20.10 resolves a managed network driver only by its full
	// name:tag).
	plugin    = "underlay:latest"
	dockerCLI = "/usr/bin/docker" // the 20.10 client: --mac-address works with it
	imageTag  = "bb:e2e"
	// ctlAddr is the swarm advertise address, on ctl0 in the namespace.
	ctlAddr = "198.18.255.1"
)

// dataDir holds the data root, logs, plugin builds and registry storage.
var dataDir = filepath.Join(os.TempDir(), "underlay-e2e")

// parents are the veth parents in the namespace (each with a peer
// NAME-p); one per test so a failed test cannot block the next.
var parents = []string{"vp1", "vp2", "vp3", "vp4", "vp5", "vp6", "vp7", "vp8", "vp9"}

// pluginSettings are the suite's `docker plugin set` values.
var pluginSettings = []string{"DOCKER_HOST=" + pluginDockerHost, "LOG_LEVEL=" + pluginLogLevel, "SCOPE=local"}

// suite is the shared environment; nil when the suite is skipped.
var suite *env

// skipWhy is why the suite is skipped (not root, outside CI).
var skipWhy string

// env is the suite's engine and what it was built from.
type env struct {
	root    string // module root
	image   string // image ID of the busybox-static image
	dockerd *exec.Cmd
	exited  chan struct{}

	mu             sync.Mutex
	registry       *exec.Cmd
	registryExited chan struct{}
	hostLinks      []string // host links before the suite
	nsBase         []string // links of the namespace as setup left it
	logOffset      int64    // start of the current test's part of dockerd.log
	createdNow     []string // paths the suite's engine created outside its own dirs
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		if inCI() {
			fmt.Fprintln(os.Stderr, "e2e: FAIL: the Docker end-to-end suite needs root and CI runs as root")
			return 1
		}
		skipWhy = "skipped: the Docker end-to-end suite needs root (a dockerd, network namespaces, links): run `sudo make test-e2e`"
		fmt.Fprintln(os.Stderr, "e2e:", skipWhy)
		return m.Run()
	}
	start := time.Now()
	var once sync.Once
	var cleanupErr error
	cleanup := func() { once.Do(func() { cleanupErr = teardownAll(suite) }) }

	// Interrupted (Ctrl-C, CI stopping) or about to hit go test's
	// -timeout, which panics without running deferred functions: clean up
	// first.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigc
		fmt.Fprintf(os.Stderr, "e2e: %v: cleaning up before exiting\n", s)
		cleanup()
		os.Exit(130)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 2*time.Minute {
			time.AfterFunc(d-90*time.Second, func() {
				fmt.Fprintf(os.Stderr, "e2e: the suite is about to reach -timeout %s: cleaning up and failing\n", d)
				cleanup()
				os.Exit(1)
			})
		}
	}

	e, err := setup()
	suite = e
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: setup:", err)
		keepLog()
		cleanup()
		if cleanupErr != nil {
			fmt.Fprintln(os.Stderr, "e2e: cleanup:", cleanupErr)
		}
		return 1
	}
	code := m.Run()
	if code != 0 {
		keepLog()
	}
	cleanup()
	if cleanupErr != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: cleanup:", cleanupErr)
		code = 1
	} else if err := e.checkHostUntouched(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: after cleanup:", err)
		code = 1
	}
	fmt.Fprintf(os.Stderr, "e2e: suite wall time %s\n", time.Since(start).Round(time.Second))
	return code
}

func inCI() bool { return os.Getenv("CI") != "" }

// keepLog copies dockerd's log (with the plugin's lines) out of the data
// dir before cleanup removes it, for a failed run.
func keepLog() {
	src := filepath.Join(dataDir, "dockerd.log")
	dst := filepath.Join(os.TempDir(), "underlay-e2e-dockerd.log")
	if b, err := os.ReadFile(src); err == nil && os.WriteFile(dst, b, 0o644) == nil {
		fmt.Fprintf(os.Stderr, "e2e: dockerd's log (with the plugin's output) is kept in %s\n", dst)
	}
}

// need is the first call of every test: it skips (or fails in CI) when the
// suite cannot run, and marks where the test's part of dockerd's log
// starts.
func need(t *testing.T) *env {
	t.Helper()
	if suite == nil {
		if inCI() {
			t.Fatal("the suite did not start")
		}
		t.Skip(skipWhy)
	}
	suite.markLog()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dockerd's log during the test (last lines):\n%s", tail(suite.logSinceMark(), 80))
		}
	})
	return suite
}

// setup installs what is missing, cleans up after an earlier run that was
// killed, and starts the suite's engine with the plugin from `make plugin`.
func setup() (*env, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	e := &env{root: filepath.Clean(filepath.Join(wd, "..", ".."))}
	if err := installDeps(e.root); err != nil {
		return nil, err
	}
	if err := teardownAll(nil); err != nil {
		return nil, fmt.Errorf("clean up after an earlier run: %w", err)
	}
	if e.hostLinks, err = linkNames(""); err != nil {
		return nil, err
	}
	e.recordCreated()
	for _, d := range []string{dataDir, runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := e.makeNetns(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dataDir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		return nil, err
	}
	if err := e.startDockerd(); err != nil {
		return nil, err
	}
	if err := e.importImage(); err != nil {
		return nil, err
	}
	// `make plugin` as a user runs it: bin/underlay, plugin/build.sh,
	// `docker plugin create underlay:latest` on DOCKER_HOST.
	if out, err := e.make("plugin", "PLUGIN="+plugin); err != nil {
		return nil, fmt.Errorf("make plugin: %w\n%s", err, out)
	}
	if _, err := e.docker(append([]string{"plugin", "set", plugin}, pluginSettings...)...); err != nil {
		return nil, err
	}
	if _, err := e.docker("plugin", "enable", plugin); err != nil {
		return nil, err
	}
	if e.nsBase, err = linkNames(nsName); err != nil {
		return nil, err
	}
	return e, nil
}

// installDeps installs docker.io, busybox-static and docker-registry with
// the repository's test/deps.sh when one of them is missing.
func installDeps(root string) error {
	missing := func() []string {
		var out []string
		for _, c := range []string{"dockerd", "containerd", "busybox", "docker-registry", "nsenter", "ip", "make"} {
			if _, err := exec.LookPath(c); err != nil {
				out = append(out, c)
			}
		}
		if _, err := os.Stat(dockerCLI); err != nil {
			out = append(out, dockerCLI)
		}
		return out
	}
	if len(missing()) == 0 {
		return nil
	}
	cmd := exec.Command(filepath.Join(root, "test", "deps.sh"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("test/deps.sh: %w", err)
	}
	if m := missing(); len(m) > 0 {
		return fmt.Errorf("still missing after test/deps.sh: %s (apt-get install docker.io busybox-static docker-registry)", strings.Join(m, ", "))
	}
	return nil
}

// Paths an engine creates outside its data and exec roots. Those that did
// not exist before the suite are removed after it when empty.
var engineLeftovers = []string{"/run/containerd/s", "/run/containerd", "/run/docker/plugins", "/run/docker", "/etc/docker/key.json", "/etc/docker"}

const createdList = "created-paths" // in dataDir, for a later run after a kill

func (e *env) recordCreated() {
	var absent []string
	for _, p := range engineLeftovers {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, p)
		}
	}
	e.createdNow = absent
	_ = os.MkdirAll(dataDir, 0o700)
	_ = os.WriteFile(filepath.Join(dataDir, createdList), []byte(strings.Join(absent, "\n")), 0o600)
	var shims []string
	ents, _ := os.ReadDir(shimSockets)
	for _, ent := range ents {
		shims = append(shims, ent.Name())
	}
	_ = os.WriteFile(filepath.Join(dataDir, shimList), []byte(strings.Join(shims, "\n")), 0o600)
}

// shimSockets is where containerd's shims put their sockets whatever
// containerd's root; a shim killed with SIGKILL leaves its socket.
const (
	shimSockets = "/run/containerd/s"
	shimList    = "shim-sockets" // in dataDir: the sockets there before the suite
)

// removeDeadShimSockets removes the shim sockets that appeared since the
// suite started and that no process listens on any more.
func removeDeadShimSockets() {
	before := map[string]bool{}
	for _, n := range strings.Fields(readFile(filepath.Join(dataDir, shimList))) {
		before[n] = true
	}
	ents, _ := os.ReadDir(shimSockets)
	for _, ent := range ents {
		p := filepath.Join(shimSockets, ent.Name())
		if before[ent.Name()] || ent.Type()&os.ModeSocket == 0 {
			continue
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			continue
		}
		_ = os.Remove(p)
	}
}

// makeNetns creates the namespace with lo, the veth parents and ctl0 (the
// swarm advertise address).
func (e *env) makeNetns() error {
	cmds := [][]string{{"netns", "add", nsName}, {"-n", nsName, "link", "set", "lo", "up"}}
	for _, p := range append(append([]string{}, parents...), "ctl0") {
		cmds = append(cmds,
			[]string{"-n", nsName, "link", "add", p, "mtu", "1500", "type", "veth", "peer", "name", p + "-p"},
			[]string{"-n", nsName, "link", "set", p, "up"},
			[]string{"-n", nsName, "link", "set", p + "-p", "up"})
	}
	cmds = append(cmds, []string{"-n", nsName, "addr", "add", ctlAddr + "/24", "dev", "ctl0"})
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// startDockerd starts the suite's dockerd in the namespace and waits for
// its API.
func (e *env) startDockerd() error {
	logf, err := os.OpenFile(filepath.Join(dataDir, "dockerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+nsPath, "--",
		"dockerd",
		"--config-file", filepath.Join(dataDir, "daemon.json"),
		"--data-root", filepath.Join(dataDir, "root"),
		"--exec-root", execRoot,
		"-H", "unix://"+sockPath,
		"--pidfile", pidPath,
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--cgroup-parent", cgroupParent,
		"--shutdown-timeout", "5",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Not in the test's process group: a Ctrl-C reaches the suite, which
	// then stops dockerd in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.mu.Lock()
	e.dockerd, e.exited = cmd, exited
	e.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if pingDocker() == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("dockerd exited at start (%v); its log:\n%s", cmd.ProcessState, tail(readFile(filepath.Join(dataDir, "dockerd.log")), 30))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("dockerd did not answer on " + sockPath + " within 60s")
		}
	}
}

// stopDockerd stops the suite's dockerd with SIGTERM (SIGKILL after 60 s).
func (e *env) stopDockerd() error {
	e.mu.Lock()
	cmd, exited := e.dockerd, e.exited
	e.dockerd = nil
	e.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("dockerd did not stop within 60s of SIGTERM: killed")
	}
}

func (e *env) restartDockerd(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := e.stopDockerd(); err != nil {
		t.Fatal(err)
	}
	if err := e.startDockerd(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dockerd restarted in %s", time.Since(start).Round(time.Millisecond))
}

// crashDockerd kills the suite's dockerd with SIGKILL (its containerd dies
// with it; shims, containers and plugins keep running) and starts it again.
func (e *env) crashDockerd(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	cmd, exited := e.dockerd, e.exited
	e.dockerd = nil
	e.mu.Unlock()
	if cmd == nil {
		t.Fatal("dockerd is not running")
	}
	containerd, _ := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(execRoot, "containerd", "containerd.pid"))))
	_ = cmd.Process.Kill()
	<-exited
	// dockerd's containerd dies with it (parent-death signal). dockerd
	// 20.10 at start takes a containerd pid that still exists for a live
	// containerd and waits for its socket in vain, so wait until the dead
	// one is reaped (this machine's init reaps orphans late).
	if containerd > 0 {
		start := time.Now()
		for time.Since(start) < 60*time.Second {
			if err := syscall.Kill(containerd, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("old containerd %d gone after %s", containerd, time.Since(start).Round(time.Millisecond))
	}
	if err := e.startDockerd(); err != nil {
		t.Fatal(err)
	}
	t.Log("dockerd killed with SIGKILL and started again")
}

// pingDocker asks the suite's API for /_ping.
func pingDocker() error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sockPath)
		}}}
	resp, err := c.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/_ping: %s", resp.Status)
	}
	return nil
}

// importImage imports a busybox-static image: bin/busybox and a link per
// applet.
func (e *env) importImage() error {
	dir := filepath.Join(dataDir, "image")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
				return err
			}
		}
	}
	tarball := filepath.Join(dataDir, "bb.tar")
	if out, err := exec.Command("tar", "-C", dir, "-cf", tarball, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, out)
	}
	if _, err := e.docker("import", tarball, imageTag); err != nil {
		return err
	}
	e.image, err = e.docker("image", "inspect", "-f", "{{.Id}}", imageTag)
	return err
}

// cliEnv is the environment of docker CLI calls: the suite's engine, and a
// CLI config of the suite's own.
func (e *env) cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			env = append(env, kv)
		}
	}
	return append(env, "DOCKER_HOST=unix://"+sockPath, "DOCKER_CONFIG="+filepath.Join(dataDir, "cli"))
}

// docker runs the 20.10 CLI against the suite's engine and returns its
// trimmed combined output.
func (e *env) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dockerCLI, args...)
	cmd.Env = e.cliEnv()
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// teardownAll stops and removes everything of the suite: its engine (after
// leaving swarm and removing containers, networks and plugins), every
// process left in its namespace or cgroup, mounts under its directories,
// the namespace and the paths the engine created. With e nil it cleans up
// after an earlier run that was killed.
func teardownAll(e *env) error {
	var errs []error
	if e != nil {
		e.stopRegistry()
	}
	if pingDocker() == nil {
		dk := &env{}
		if state, _ := dk.docker("info", "-f", "{{.Swarm.LocalNodeState}}"); state != "inactive" {
			_, _ = dk.docker("swarm", "leave", "--force")
		}
		if ids, _ := dk.docker("ps", "-aq"); ids != "" {
			_, _ = dk.docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		if ids, _ := dk.docker("network", "ls", "-q", "--filter", "type=custom"); ids != "" {
			_, _ = dk.docker(append([]string{"network", "rm"}, strings.Fields(ids)...)...)
		}
		if ids, _ := dk.docker("plugin", "ls", "-q"); ids != "" {
			for _, id := range strings.Fields(ids) {
				if _, err := dk.docker("plugin", "rm", "-f", id); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// The engine: ours by handle, or by pid file after a killed run.
	if e != nil {
		if err := e.stopDockerd(); err != nil {
			errs = append(errs, err)
		}
	}
	if pid := ourDockerdPid(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid, 30*time.Second)
	}
	// Whatever is left in the namespace (containerd, shims, plugins, the
	// registry) or in the cgroup parent (container processes).
	for i := 0; i < 2; i++ {
		pids := ourProcesses()
		if len(pids) == 0 {
			break
		}
		if i == 1 {
			errs = append(errs, fmt.Errorf("processes of the suite still running after SIGKILL: %v", pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitGone(pid, 10*time.Second)
		}
	}
	// Plugin socket directories of plugins that were not removed.
	if ents, err := os.ReadDir(filepath.Join(dataDir, "root", "plugins")); err == nil {
		for _, ent := range ents {
			if len(ent.Name()) == 64 {
				_ = os.RemoveAll(filepath.Join("/run/docker/plugins", ent.Name()))
			}
		}
	}
	if err := unmountUnder(dataDir, runDir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(nsPath); err == nil {
		if out, err := exec.Command("ip", "netns", "del", nsName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", nsName, err, out))
		}
	}
	removeCgroups()
	removeDeadShimSockets()
	created := strings.Fields(readFile(filepath.Join(dataDir, createdList)))
	if e != nil {
		created = e.createdNow
	}
	for _, d := range []string{runDir, dataDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range created {
		_ = os.Remove(p) // only if empty (directories)
	}
	return errors.Join(errs...)
}

// ourDockerdPid is the pid in the suite's pid file if that process is a
// dockerd with the suite's exec root.
func ourDockerdPid() int {
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(pidPath)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !strings.Contains(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), execRoot) {
		return 0
	}
	return pid
}

// ourProcesses lists the processes in the suite's namespace or in its
// cgroup parent.
func ourProcesses() []int {
	var nsIno uint64
	var st unix.Stat_t
	if unix.Stat(nsPath, &st) == nil {
		nsIno = st.Ino
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() || isZombie(pid) {
			continue
		}
		ours := false
		if nsIno != 0 {
			var pst unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &pst) == nil && pst.Ino == nsIno {
				ours = true
			}
		}
		if strings.Contains(readFile(fmt.Sprintf("/proc/%d/cgroup", pid)), ":"+cgroupParent+"/") {
			ours = true
		}
		if ours {
			out = append(out, pid)
		}
	}
	return out
}

func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if isZombie(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isZombie reports whether a process has exited and waits to be reaped:
// it holds nothing any more.
func isZombie(pid int) bool {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	return i > 0 && strings.HasPrefix(s[i:], ") Z ")
}

// unmountUnder detaches every mount at or below the given directories,
// deepest first.
func unmountUnder(dirs ...string) error {
	var points []string
	for _, line := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				points = append(points, mp)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// removeCgroups removes the (empty) cgroup directories of the suite's
// cgroup parent in every hierarchy.
func removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupParent)
	if fi, err := os.Stat("/sys/fs/cgroup" + cgroupParent); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup"+cgroupParent)
	}
	for _, r := range roots {
		var dirs []string
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

// checkHostUntouched compares the host after cleanup with the host before
// the suite.
func (e *env) checkHostUntouched() error {
	var errs []error
	now, err := linkNames("")
	if err != nil {
		return err
	}
	if fmt.Sprint(now) != fmt.Sprint(e.hostLinks) {
		errs = append(errs, fmt.Errorf("host links %v, before the suite %v", now, e.hostLinks))
	}
	if pids := ourProcesses(); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes left: %v", pids))
	}
	if _, err := os.Stat(nsPath); err == nil {
		errs = append(errs, fmt.Errorf("namespace %s left", nsName))
	}
	if m := strings.Count(readFile("/proc/self/mountinfo"), " "+runDir) + strings.Count(readFile("/proc/self/mountinfo"), " "+dataDir); m > 0 {
		errs = append(errs, fmt.Errorf("%d mounts left under %s or %s", m, runDir, dataDir))
	}
	for _, p := range append([]string{runDir, dataDir}, e.createdNow...) {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, fmt.Errorf("%s left", p))
		}
	}
	return errors.Join(errs...)
}

// linkNames lists the links of a named namespace ("" for the host's) with
// a NETLINK_ROUTE-only handle.
func linkNames(ns string) ([]string, error) {
	var h *netlink.Handle
	var err error
	if ns == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var nsh netns.NsHandle
		if nsh, err = netns.GetFromName(ns); err != nil {
			return nil, fmt.Errorf("open namespace %s: %w", ns, err)
		}
		defer nsh.Close()
		h, err = netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var links []netlink.Link
	for i := 0; i < 5; i++ {
		if links, err = h.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	sort.Strings(names)
	return names, nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// markLog and logSinceMark give the part of dockerd.log (which holds the
// plugin's output) written since the mark.
func (e *env) markLog() {
	fi, err := os.Stat(filepath.Join(dataDir, "dockerd.log"))
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logOffset = 0
	if err == nil {
		e.logOffset = fi.Size()
	}
}

func (e *env) logSinceMark() string {
	e.mu.Lock()
	off := e.logOffset
	e.mu.Unlock()
	s := readFile(filepath.Join(dataDir, "dockerd.log"))
	if int64(len(s)) < off {
		return s
	}
	return s[off:]
}

// jsonOut runs docker with a JSON format and decodes the answer.
func (e *env) jsonOut(v any, args ...string) error {
	out, err := e.docker(args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
