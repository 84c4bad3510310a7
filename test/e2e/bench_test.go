//go:build e2e && bench

package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestBenchDocker compares, through the suite's engine, Docker's built-in
// macvlan driver with underlay as a managed plugin: `docker network create`
// + `rm`, `docker run --rm` on the network (container start to exit), and
// the throughput of 16 concurrent `docker run --rm` on one network
// (bench_concurrent_test.go). The two drivers alternate run by run (block
// by block for the concurrent runs), on the same parent. `make bench` runs
// it (test/bench) and prints its rows, written as tab-separated lines to
// $BENCH_ROWS, in the one table.
func TestBenchDocker(t *testing.T) {
	e := need(t)
	e.benchPlugin(t)
	const parent = benchParent
	drivers := benchDrivers
	timed := func(args ...string) time.Duration { return e.timed(t, args...) }

	// Network create + rm, alternating drivers.
	netTimes := map[string][]time.Duration{}
	const netRounds = 30
	for i := 0; i < netRounds; i++ {
		for k := range drivers {
			dr := drivers[(i+k)%2] // alternate which goes first
			name := fmt.Sprintf("bench-n%d", i)
			d := timed("network", "create", "-d", dr.driver, "-o", "parent="+parent, "--subnet", "198.18.250.0/24", name)
			d += timed("network", "rm", name)
			netTimes[dr.name] = append(netTimes[dr.name], d)
		}
	}

	// docker run --rm on a network of each driver.
	for k, dr := range drivers {
		name := fmt.Sprintf("bench-run%d", k)
		e.network(t, name, "-d", dr.driver, "-o", "parent="+parent, "--subnet", fmt.Sprintf("198.18.%d.0/24", 251+k))
	}
	const runRounds = 40
	runTimes := e.interleavedRuns(t, "bench-run", runRounds)

	// docker run --rm with the address probe on (its 300 ms default) and
	// off, alternating, on underlay networks: the probe's cost at a
	// container's start, which should be its budget and nothing more.
	probeOpts := []string{"address_probe=300ms", "address_probe=0"}
	for k, o := range probeOpts {
		e.network(t, fmt.Sprintf("bench-probe%d", k), "-d", plugin, "-o", "parent="+parent, "-o", o, "--subnet", fmt.Sprintf("198.18.%d.0/24", 248+k))
	}
	const probeRounds = 20
	probeTimes := e.alternatingRuns(t, "bench-probe", probeOpts, probeRounds, 1)

	// docker run --rm on the repair plugin (it reads each container's
	// interface after the Join, in the background) and on the default
	// plugin (no repair), alternating: what the read costs a start.
	repair := "underlay-bench-repair:latest"
	e.repairPlugin(t, repair)
	repairDrivers := []string{plugin, repair}
	for k, dr := range repairDrivers {
		e.network(t, fmt.Sprintf("bench-repair%d", k), "-d", dr, "-o", "parent="+parent, "--subnet", fmt.Sprintf("198.18.%d.0/24", 246+k))
	}
	repairTimes := e.alternatingRuns(t, "bench-repair", repairDrivers, probeRounds, 1)

	var rows []string
	rows = append(rows, ratioRow("docker", fmt.Sprintf("network create+rm median of %d, engine %s (vs built-in)", netRounds, engineLabel), median(netTimes["underlay"]), median(netTimes["built-in macvlan"]), 1.2))
	rows = append(rows, ratioRow("docker", fmt.Sprintf("docker run --rm median of %d, engine %s (vs built-in)", runRounds, engineLabel), median(runTimes["underlay"]), median(runTimes["built-in macvlan"]), 0.95))
	on, off := median(probeTimes[probeOpts[0]]), median(probeTimes[probeOpts[1]])
	cost := on - off
	v := "met"
	if cost > 310*time.Millisecond { // its 300 ms budget and 10 ms (issue 34; 50 ms before it)
		v = "MISSED"
	}
	rows = append(rows, strings.Join([]string{"docker", fmt.Sprintf("docker run --rm median of %d, address_probe=300ms vs 0 (cost)", probeRounds),
		benchMs(on), benchMs(off), fmt.Sprintf("%+.1f ms", float64(cost.Microseconds())/1000), "<= +310 ms", v}, "\t"))
	rows = append(rows, ratioRow("docker", fmt.Sprintf("docker run --rm median of %d, engine %s, repair plugin (reads each container's interface) vs the default plugin", probeRounds, engineLabel),
		median(repairTimes[repair]), median(repairTimes[plugin]), 1.05))
	rows = append(rows, benchConcurrentRun(t, e, map[string]string{drivers[0].name: "bench-run0", drivers[1].name: "bench-run1"}))
	writeBenchRows(t, rows)
}

// benchParent is the parent of the benchmarks' networks.
const benchParent = "vp9"

// benchDrivers are the drivers the benchmarks compare, by label: the
// labels key the times they return.
var benchDrivers = []struct{ name, driver string }{{"built-in macvlan", "macvlan"}, {"underlay", plugin}}

// benchPlugin runs the plugin at LOG_LEVEL=info for the test, as users run
// it (the suite runs it at debug level), and puts the suite's level back
// at cleanup.
func (e *env) benchPlugin(t *testing.T) {
	e.ensurePlugin(t)
	e.disablePlugin(t)
	e.must(t, "plugin", "set", plugin, "LOG_LEVEL=info")
	e.must(t, "plugin", "enable", plugin)
	t.Cleanup(func() {
		e.disablePlugin(t)
		e.must(t, "plugin", "set", plugin, "LOG_LEVEL="+pluginLogLevel)
		e.must(t, "plugin", "enable", plugin)
	})
}

// timed runs docker, failing the test on error, and returns its wall time.
func (e *env) timed(t *testing.T, args ...string) time.Duration {
	t.Helper()
	t0 := time.Now()
	e.must(t, args...)
	return time.Since(t0)
}

// interleavedRuns times `docker run --rm` on the networks prefix0 (of
// benchDrivers[0]) and prefix1 (of benchDrivers[1]) rounds times each,
// the drivers alternating run by run and which goes first alternating
// round by round, after two warm-up rounds; the times by driver label.
func (e *env) interleavedRuns(t *testing.T, prefix string, rounds int) map[string][]time.Duration {
	return e.alternatingRuns(t, prefix, []string{benchDrivers[0].name, benchDrivers[1].name}, rounds, 2)
}

// alternatingRuns times `docker run --rm` on the networks prefix0 and
// prefix1, alternating which goes first, for warm rounds then rounds
// counted; the times are keyed by labels[0] and labels[1].
func (e *env) alternatingRuns(t *testing.T, prefix string, labels []string, rounds, warm int) map[string][]time.Duration {
	times := map[string][]time.Duration{}
	for i := 0; i < rounds+warm; i++ {
		for k := range labels {
			idx := (i + k) % 2
			d := e.timed(t, "run", "--rm", "--network", fmt.Sprintf("%s%d", prefix, idx), e.image, "true")
			if i >= warm {
				times[labels[idx]] = append(times[labels[idx]], d)
			}
		}
	}
	return times
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func benchMs(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// ratioRow is a table row (tab-separated) of underlay's time u against
// the built-in driver's b, with its target: u/b <= target.
func ratioRow(section, measure string, u, b time.Duration, target float64) string {
	r := float64(u) / float64(b)
	v := "met"
	if r > target {
		v = "MISSED"
	}
	return strings.Join([]string{section, measure, benchMs(u), benchMs(b), fmt.Sprintf("%.2f", r), fmt.Sprintf("<= %.2f", target), v}, "\t")
}

// writeBenchRows logs the rows and writes them to $BENCH_ROWS when set,
// for `make bench`'s table (test/bench).
func writeBenchRows(t *testing.T, rows []string) {
	for _, r := range rows {
		t.Log(strings.ReplaceAll(r, "\t", " | "))
	}
	if path := os.Getenv("BENCH_ROWS"); path != "" {
		if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
