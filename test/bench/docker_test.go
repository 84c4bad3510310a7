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
// go test of its own, and adds the rows it writes to $BENCH_ROWS
// (tab-separated lines) to the table.
func e2eBench(t *testing.T, tb *table, test string) {
	rows := filepath.Join(t.TempDir(), "rows.tsv")
	cmd := exec.Command("go", "test", "-tags", "e2e,bench", "-count=1", "-run", "^"+test+"$", "-v", "-timeout", "40m", "./test/e2e/")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "BENCH_ROWS="+rows)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("Docker-level benchmark %s: %v", test, err)
	}
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tb.row(strings.Split(line, "\t")...)
	}
}
