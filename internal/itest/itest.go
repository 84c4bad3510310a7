// Package itest is the kit of underlay's integration tests: it runs the
// real underlay binary inside a fresh network namespace, speaks the remote
// driver protocol to it over its unix socket, and reads the namespace's
// links with netlink. The host suite, the VM suite, the reliability suite
// and the benchmarks share it.
package itest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// envExecInNetns marks the re-executed test binary that joins the network
// namespace passed as fd 3 and then executes its arguments.
const envExecInNetns = "UNDERLAY_ITEST_EXEC_IN_NETNS"

// Main is the TestMain of packages using the kit: it serves the
// re-execution that starts the daemon inside a namespace, then runs the
// tests, then each of after (checks of what the whole run left behind,
// which must come after every test whatever their names and order): one
// that fails prints "FAIL: after the suite: ..." and fails the run.
func Main(m *testing.M, after ...func() error) {
	if os.Getenv(envExecInNetns) == "1" {
		execInNetns()
	}
	code := m.Run()
	for _, check := range after {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: after the suite:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// execInNetns joins the namespace on fd 3 and replaces this process with
// os.Args[1:]. execve keeps the namespaces of the calling thread.
func execInNetns() {
	runtime.LockOSThread()
	if err := unix.Setns(3, unix.CLONE_NEWNET); err != nil {
		fmt.Fprintln(os.Stderr, "itest: setns:", err)
		os.Exit(126)
	}
	_ = unix.Close(3)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, envExecInNetns+"=") {
			env = append(env, e)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, "itest: exec", os.Args[1], err)
	os.Exit(127)
}

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") != "" }

// InVM reports whether the tests run inside the project's test VM.
func InVM() bool { return os.Getenv("IN_VM") != "" }

// RequireRoot skips the test when not root, except in CI, where it fails.
// Under `make check` (UNDERLAY_CHECK=1) it skips, root or not, CI or not:
// that target runs only the tests that need neither root nor a namespace.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Getenv("UNDERLAY_CHECK") != "" {
		t.Skip("skipped by make check: needs root and network namespaces; make test runs it")
	}
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatal("this test needs root (network namespaces, links) and CI runs as root: run the suite as root")
	}
	t.Skip("skipped: needs root to create network namespaces and links; run `sudo make test`")
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Binary returns the underlay binary under test: $UNDERLAY_BIN, or one
// built once per test process with the crashpoints tag (and the race
// detector when the tests run with -race).
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("UNDERLAY_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "underlay-itest-bin")
		if err != nil {
			buildErr = err
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "underlay")
		args := []string{"build", "-tags", "crashpoints", "-o", builtBin}
		env := append(os.Environ(), "CGO_ENABLED=0")
		if raceEnabled {
			args = append(args, "-race")
			env = append(os.Environ(), "CGO_ENABLED=1")
		}
		cmd := exec.Command("go", append(args, "./cmd/underlay")...)
		cmd.Dir = root
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/underlay: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w (set UNDERLAY_BIN to a built underlay binary)", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the underlay module: set UNDERLAY_BIN")
	}
	return filepath.Dir(mod), nil
}
