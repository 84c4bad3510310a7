//go:build bench

package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchDocker runs the Docker-level comparison in the end-to-end suite,
// which owns a dockerd of its own (test/e2e/bench_test.go), and adds the
// rows it reports to the table.
func benchDocker(t *testing.T, tb *table) { e2eBench(t, tb, "TestBenchDocker") }

// e2eBench runs the end-to-end suite's test (tags e2e,bench) alone, in a
// go test of its own, on Debian's engine and then on the current engine
// when it is built ($BENCH_ENGINE_DIR, make bench sets it: make
// engine-current builds it), and adds the rows it writes to $BENCH_ROWS
// (tab-separated lines) to the table.
func e2eBench(t *testing.T, tb *table, test string) {
	e2eBenchOn(t, tb, test)
	dir := os.Getenv("BENCH_ENGINE_DIR")
	if _, err := os.Stat(filepath.Join(dir, "dockerd")); dir == "" || err != nil {
		tb.row("docker", test+" on the current engine: not run (build it with make engine-current)", "", "", "", "", "")
		return
	}
	e2eBenchOn(t, tb, test, "E2E_ENGINE=current", "E2E_DOCKERD="+filepath.Join(dir, "dockerd"), "E2E_RUNC="+filepath.Join(dir, "runc"))
}

func e2eBenchOn(t *testing.T, tb *table, test string, env ...string) {
	rows := filepath.Join(t.TempDir(), "rows.tsv")
	cmd := exec.Command("go", "test", "-tags", "e2e,bench", "-count=1", "-run", "^"+test+"$", "-v", "-timeout", "40m", "./test/e2e/")
	cmd.Dir = filepath.Join("..", "..")
	// CGO_ENABLED=0: the suite builds the managed plugin, whose rootfs has
	// no libc (make bench runs the benchmarks with cgo for the chart).
	cmd.Env = append(append(os.Environ(), "BENCH_ROWS="+rows, "CGO_ENABLED=0"), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("Docker-level benchmark %s %v: %v", test, env, err)
	}
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tb.row(strings.Split(line, "\t")...)
	}
}
