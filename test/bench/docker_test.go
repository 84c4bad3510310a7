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
func benchDocker(t *testing.T, tb *table) {
	rows := filepath.Join(t.TempDir(), "rows.tsv")
	cmd := exec.Command("go", "test", "-tags", "e2e,bench", "-count=1", "-run", "^TestBenchDocker$", "-v", "-timeout", "40m", "./test/e2e/")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "BENCH_ROWS="+rows)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("Docker-level benchmark: %v", err)
	}
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tb.row(strings.Split(line, "\t")...)
	}
}
