//go:build bench

// Package bench measures underlay against its floor and against Docker's
// built-in drivers. `make bench` runs TestBench, which prints one table.
// Comparisons run side by side in one run, interleaved in blocks, and are
// quoted as medians and ratios: these machines are noisy.
package bench

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

func TestMain(m *testing.M) { itest.Main(m) }

// result is one measured series.
type result struct {
	ops      int
	wall     time.Duration
	lat      []time.Duration
	failures int
}

func (r *result) add(o result) {
	r.ops += o.ops
	r.wall += o.wall
	r.lat = append(r.lat, o.lat...)
	r.failures += o.failures
}

func (r result) opsPerSec() float64 {
	if r.wall == 0 {
		return 0
	}
	return float64(r.ops) / r.wall.Seconds()
}

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), r.lat...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[int(p*float64(len(l)-1))]
}

// run calls op perWorker times on each of workers goroutines and records
// each call's latency.
func run(workers, perWorker int, op func(w, i int) error) result {
	var mu sync.Mutex
	var res result
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			lat := make([]time.Duration, 0, perWorker)
			fails := 0
			for i := 0; i < perWorker; i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					fails++
					if fails == 1 {
						fmt.Fprintln(os.Stderr, "bench: op failed:", err)
					}
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.failures += fails
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	res.wall = time.Since(start)
	res.ops = workers * perWorker
	return res
}

// table collects the rows printed at the end.
type table struct {
	rows [][]string
}

func (t *table) row(cols ...string) { t.rows = append(t.rows, cols) }

func (t *table) print() {
	widths := make([]int, 0)
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			if len(c) > widths[i] {
				widths[i] = len(c)
			}
		}
	}
	var b strings.Builder
	b.WriteString("\n")
	for n, r := range t.rows {
		for i, c := range r {
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		b.WriteString("\n")
		if n == 0 {
			for i := range widths {
				b.WriteString(strings.Repeat("-", widths[i]) + "  ")
			}
			b.WriteString("\n")
		}
	}
	fmt.Print(b.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// TestBench runs every section and prints the table.
func TestBench(t *testing.T) {
	itest.RequireRoot(t)
	tb := &table{}
	tb.row("section", "measure", "underlay", "reference", "ratio", "target", "")
	sections := []struct {
		name string
		fn   func(*testing.T, *table)
	}{
		{"driver", benchDriver},
		{"scale", benchScale},
		{"ipam", benchIPAM},
		{"probe", benchProbe},
		{"lancheck", benchLANCheck},
		{"docker", benchDocker},
		{"growth", benchGrowth},
	}
	only := os.Getenv("BENCH")
	for _, s := range sections {
		if only != "" && !strings.Contains(only, s.name) {
			continue
		}
		t.Run(s.name, func(t *testing.T) { s.fn(t, tb) })
	}
	tb.print()
}
