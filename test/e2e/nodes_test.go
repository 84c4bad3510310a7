//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// The multi-node harness: more dockerds on this one machine, each in a
// network namespace of its own with its own data root, exec root, API
// socket, pid file, cgroup parent and log, found again by fixed names so a
// later run cleans up after a killed one (teardownNodes). Node 1 is the
// suite's engine; nodes 2 and 3 are started by the test that needs them.

// extraNodes is how many engines the harness adds to the suite's.
const extraNodes = 2

// node is one engine of the multi-node swarm.
type node struct {
	name   string // n1, n2, n3
	ns     string // network namespace
	run    string // API socket, pid file, exec root (short paths: unix sockets)
	dir    string // data root, log, plugin build, CLI config
	cgroup string // cgroup parent of its containers
	lan    string // its LAN link, another name on every node
	lanIP  string // the LAN link's address (/24)
	ctlIP  string // swarm advertise address (/24) on ctlLink
	id     string // swarm node ID, once in the swarm

	mu     sync.Mutex
	cmd    *exec.Cmd // nil for node 1 (the suite's) and when stopped
	exited chan struct{}
}

// suiteNode is node 1: the suite's engine, its paths and namespace.
func suiteNode() *node {
	return &node{name: "n1", ns: nsName, run: runDir, dir: dataDir, cgroup: cgroupParent,
		lan: "lana", lanIP: "198.18.41.11", ctlIP: "198.18.254.1"}
}

// extraNode is node i (2, 3, …): fixed names derived from the suite's.
func extraNode(i int) *node {
	s := "n" + strconv.Itoa(i)
	return &node{name: s, ns: nsName + "-" + s, run: runDir + "-" + s, dir: dataDir + "-" + s,
		cgroup: cgroupParent + "-" + s, lan: "lan" + string(rune('a'+i-1)),
		lanIP: fmt.Sprintf("198.18.41.%d", 10+i), ctlIP: fmt.Sprintf("198.18.254.%d", i)}
}

func (n *node) sock() string     { return filepath.Join(n.run, "docker.sock") }
func (n *node) pidFile() string  { return filepath.Join(n.run, "docker.pid") }
func (n *node) execRoot() string { return filepath.Join(n.run, "x") }
func (n *node) dataRoot() string { return filepath.Join(n.dir, "root") }
func (n *node) logPath() string  { return filepath.Join(n.dir, "dockerd.log") }
func (n *node) nsPath() string   { return "/run/netns/" + n.ns }
func (n *node) suite() bool      { return n.ns == nsName }

// pluginSettings are the suite's plugin settings at global scope. The
// extra nodes' plugins mount the node's own run directory at /host/run
// (run.source) instead of the machine's /run, as on a machine of its own
// where /run holds one engine's exec root: a plugin keeps a private copy
// of the namespace mounts under its /run mount as they were when it
// started (docs/install.md, As a managed plugin: run.source), and with the machine's /run a
// plugin restarted on one node would keep the other nodes' container
// namespaces (with their interfaces on the LAN) alive, which no real
// deployment has. Node 1's plugin keeps the suite's /run: it starts before
// the other nodes exist and is not restarted until they are gone.
func (n *node) pluginSettings() []string {
	var out []string
	for _, kv := range pluginSettings {
		switch {
		case strings.HasPrefix(kv, "DOCKER_HOST=") && !n.suite():
			kv = "DOCKER_HOST=unix:///host/run/docker.sock"
		case strings.HasPrefix(kv, "SCOPE="):
			kv = "SCOPE=global"
		}
		out = append(out, kv)
	}
	if !n.suite() {
		out = append(out, "run.source="+n.run)
	}
	return out
}

// cliEnv points the 20.10 CLI at this node.
func (n *node) cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			env = append(env, kv)
		}
	}
	return append(env, "DOCKER_HOST=unix://"+n.sock(), "DOCKER_CONFIG="+filepath.Join(n.dir, "cli"))
}

// docker runs the CLI against this node and returns its trimmed combined
// output.
func (n *node) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dockerCLI, args...)
	cmd.Env = n.cliEnv()
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("%s: docker %s: %w: %s", n.name, strings.Join(args, " "), err, s)
	}
	return s, nil
}

func (n *node) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ping asks the node's API for /_ping.
func (n *node) ping() error { return pingSocket(n.sock()) }

// start starts the node's dockerd in its namespace (with a hostname of its
// own, for docker node ls) and waits for its API.
func (n *node) start() error {
	if n.suite() {
		return errors.New("node 1 is the suite's engine: the suite starts it")
	}
	for _, d := range []string{n.dir, n.run} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	cfg := filepath.Join(n.dir, "daemon.json")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// nsenter --net, not ip netns exec (which remounts /sys and breaks
	// dockerd); unshare --uts for the hostname; both exec, so the process
	// is dockerd itself.
	cmd := exec.Command("nsenter", "--net="+n.nsPath(), "--",
		"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, "underlay-e2e-"+n.name)
	cmd.Args = append(append(cmd.Args, engineArgv()...),
		"--config-file", cfg,
		"--data-root", n.dataRoot(),
		"--exec-root", n.execRoot(),
		"-H", "unix://"+n.sock(),
		"--pidfile", n.pidFile(),
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--cgroup-parent", n.cgroup,
		"--shutdown-timeout", "5",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start dockerd: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if n.ping() == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: dockerd exited at start (%v); its log:\n%s", n.name, cmd.ProcessState, itest.TailLines(readFile(n.logPath()), 30))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: dockerd did not answer on %s within 60s", n.name, n.sock())
		}
	}
}

// take hands over the running dockerd (nil when none).
func (n *node) take() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	return cmd, exited
}

// stop stops the node's dockerd with SIGTERM (SIGKILL after 60 s).
func (n *node) stop() error {
	cmd, exited := n.take()
	if cmd == nil {
		return nil
	}
	if stopProcess(cmd, exited, 60*time.Second) {
		return fmt.Errorf("%s: dockerd did not stop within 60s of SIGTERM: killed", n.name)
	}
	return nil
}

// restart stops the node's dockerd cleanly and starts it again.
func (n *node) restart(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: dockerd stopped with SIGTERM and started again in %s", n.name, time.Since(start).Round(time.Millisecond))
}

// kill kills the node's dockerd with SIGKILL (its containerd dies with it;
// shims, containers and the plugin keep running) and waits until the dead
// containerd is gone: dockerd 20.10 takes over a containerd pid that still
// exists and would wait for its socket in vain.
func (n *node) kill(t *testing.T) {
	t.Helper()
	cmd, exited := n.take()
	if cmd == nil {
		t.Fatalf("%s: dockerd is not running", n.name)
	}
	containerd, _ := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(n.execRoot(), "containerd", "containerd.pid"))))
	_ = cmd.Process.Kill()
	<-exited
	if containerd > 0 {
		waitGone(containerd, 60*time.Second)
	}
	t.Logf("%s: dockerd killed with SIGKILL", n.name)
}

// loadImage loads the suite's image into the node with its ID (services
// are created from the image ID with --no-resolve-image).
func (n *node) loadImage(t *testing.T, tarball string) {
	t.Helper()
	n.must(t, "load", "-i", tarball)
	if id := n.must(t, "image", "inspect", "-f", "{{.Id}}", imageTag); id != suite.image {
		t.Fatalf("%s: image %s has ID %s, want %s", n.name, imageTag, id, suite.image)
	}
}

// installPlugin builds the managed plugin from bin/underlay on the node
// with plugin/build.sh (as `make plugin` does), sets the node's settings
// and enables it.
func (n *node) installPlugin(t *testing.T) {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(suite.root, "bin", "underlay"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(suite.root, "plugin", "build.sh"), bin, plugin)
	cmd.Env = append(n.cliEnv(), "DOCKER="+dockerCLI, "OUT="+filepath.Join(n.dir, "plugin"), "FORCE=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: plugin/build.sh %s %s: %v\n%s", n.name, bin, plugin, err, b)
	}
	n.must(t, append([]string{"plugin", "set", plugin}, n.pluginSettings()...)...)
	n.must(t, "plugin", "enable", plugin)
}

// pluginPids lists the node's running plugin processes (/underlay serve in
// its namespace).
func (n *node) pluginPids() []int {
	var out []int
	for _, pid := range processesOf(n) {
		if strings.HasPrefix(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), "/underlay\x00serve") {
			out = append(out, pid)
		}
	}
	return out
}

// logSize is the size of the node's log: a mark for logSince.
func (n *node) logSize() int64 {
	fi, err := os.Stat(n.logPath())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is the node's log from the mark on.
func (n *node) logSince(mark int64) string {
	s := readFile(n.logPath())
	if int64(len(s)) < mark {
		return s
	}
	return s[mark:]
}
