//go:build e2e && bench

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// benchHostLinks is the size of the busy host TestBenchDockerLinks runs on:
// the links of dockerd's namespace besides lo.
const benchHostLinks = 8000

// TestBenchDockerLinks is TestBenchDocker's `docker run --rm` comparison,
// built-in macvlan against underlay, run by run alternating, on a busy
// host: dockerd's namespace is first filled up to 8,000 links (besides lo)
// with veth pairs with addresses and routes (itest.Fill, in 198.19.0.0/16
// IPv4 only, clear of the suite's subnets), which are deleted
// at the end in one request. `make bench` runs it from its growth section
// (test/bench) and prints its row, written to $BENCH_ROWS, in the one
// table.
func TestBenchDockerLinks(t *testing.T) {
	e := need(t)
	e.benchPlugin(t)

	ns := itest.OpenNetns(t, nsPath)
	have := len(ns.LinkNames()) - 1 // lo
	fill := benchHostLinks - have
	fill += fill % 2
	if fill < 0 {
		t.Fatalf("dockerd's namespace holds %d links already, more than %d", have, benchHostLinks)
	}
	t0 := time.Now()
	ns.Fill(fill)
	t.Logf("dockerd's namespace: %d links, filled with %d more in %s", have, fill, time.Since(t0).Round(time.Millisecond))
	// The plugin watches the namespace's links: let it work through the
	// fill's events before measuring (until it uses under 20 ms of CPU in
	// a second, 60 s at most).
	t0 = time.Now()
	for last := benchCPU()[1]; time.Since(t0) < time.Minute; {
		time.Sleep(time.Second)
		now := benchCPU()[1]
		if now-last < 0.02 {
			break
		}
		last = now
	}
	t.Logf("the plugin settled in %s", time.Since(t0).Round(time.Second))

	for k, dr := range benchDrivers {
		e.network(t, fmt.Sprintf("bench-links%d", k), "-d", dr.driver, "-o", "parent="+benchParent, "--subnet", fmt.Sprintf("198.18.%d.0/24", 244+k))
	}
	const rounds = 11
	times := e.interleavedRuns(t, "bench-links", rounds)
	writeBenchRows(t, []string{ratioRow("growth", fmt.Sprintf("docker run --rm median of %d, host of 8,000 links, engine %s (vs built-in)", rounds, engineLabel),
		median(times["underlay"]), median(times["built-in macvlan"]), 0.95)})
}
