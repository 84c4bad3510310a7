//go:build e2e

// Package e2e proves every path a user takes through a real Docker engine
// (20.10 from Debian's docker.io, and the current engine: engine_test.go
// says which one runs and how they differ): the managed plugin built by `make plugin`,
// networks and containers, restarts, the stale-holder check against the real
// Docker API, swarm on one node and on three (TestMultiNode: two more
// engines, each in a network namespace of its own), `docker plugin install`
// from a registry, `docker plugin upgrade`, and teardown.
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
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
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
	// pluginAddressPools is the IPAM's DEFAULT_ADDRESS_POOLS: automatic
	// pools come from 198.18.64.0/18 only (never anything outside
	// 198.18.0.0/15, and clear of the fixed subnets the tests use).
	pluginAddressPools = "base=198.18.64.0/18,size=24"
	cgroupParent       = "/underlay-e2e"
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
var parents = []string{"vp1", "vp2", "vp3", "vp4", "vp5", "vp6", "vp7", "vp8", "vp9", "vp10", "vp11", "vp12", "vp13", "vp14", "vp15", "vp16", "vp17", "vp18", "vp19", "vp20"}

// pluginSettings are the suite's `docker plugin set` values.
var pluginSettings = []string{"DOCKER_HOST=" + pluginDockerHost, "LOG_LEVEL=" + pluginLogLevel, "SCOPE=local",
	"DEFAULT_ADDRESS_POOLS=" + pluginAddressPools}

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
	release, err := lockSuite(15 * time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		return 1
	}
	defer release()
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
		fmt.Fprintf(os.Stderr, "e2e: FAIL: setup on %s: %v\n", engine, err)
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
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL on %s\n", engine)
	}
	fmt.Fprintf(os.Stderr, "e2e: suite wall time %s on %s\n", time.Since(start).Round(time.Second), engine)
	return code
}

func inCI() bool { return os.Getenv("CI") != "" }

// suiteLock serializes runs of the suite on one machine (`make test` runs
// it on two engines, one after the other; a developer may start another
// meanwhile): they share the fixed namespaces and paths above, and one
// run's setup would tear down the other's engine. The file stays (in
// /run: gone at reboot); the lock goes with the process.
const suiteLock = "/run/underlay-e2e.lock"

// lockSuite takes suiteLock, waiting at most wait for a run that holds
// it.
func lockSuite(wait time.Duration) (release func(), err error) {
	f, err := os.OpenFile(suiteLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for said := false; ; time.Sleep(time.Second) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", suiteLock, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another run of the e2e suite still holds %s after %s", suiteLock, wait)
		}
		if !said {
			fmt.Fprintf(os.Stderr, "e2e: another run of the suite holds %s: waiting (at most %s)\n", suiteLock, wait)
			said = true
		}
	}
}

// keepLog copies dockerd's log (with the plugin's lines) out of the data
// dir before cleanup removes it, for a failed run.
func keepLog() {
	src := filepath.Join(dataDir, "dockerd.log")
	dst := filepath.Join(os.TempDir(), "underlay-e2e-dockerd-"+engineLabel+".log")
	if b, err := os.ReadFile(src); err == nil && os.WriteFile(dst, b, 0o644) == nil {
		fmt.Fprintf(os.Stderr, "e2e: dockerd's log (with the plugin's output) is kept in %s\n", dst)
	}
	keepNodeLogs()
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
	logEngineOnFailure(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dockerd's log during the test (last lines):\n%s", itest.TailLines(suite.logSinceMark(), 80))
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
	if err := checkEngine(); err != nil {
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
	if err := e.askEngine(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "e2e: the suite runs on %s\n", engine)
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
