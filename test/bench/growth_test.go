//go:build bench

package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// growthSizes are the hosts the growth section measures on, in links
// besides lo: the parent's veth pair alone, then that pair with
// itest.Fill's veth pairs (addresses and routes) making up the rest.
var growthSizes = []int{2, 2000, 8000}

// benchGrowth asks whether a request's cost grows with the host: the
// endpoint cycle (CreateEndpoint with an address, Join, Leave,
// DeleteEndpoint) on a static macvlan network whose subnet the host is not
// on (so no address probe: default options), the network cycle
// (CreateNetwork, DeleteNetwork) and CreateNetwork's own latency within
// it, all at c=1, on hosts of 2, 2,000 and 8,000 links, each size's p50
// against the 2-link host's. Target: the endpoint cycle at 8,000 links
// within 1.1x of 2 links. Then `docker run --rm` through dockerd, built-in
// macvlan against underlay, on a host of 8,000 links (the end-to-end
// suite's TestBenchDockerLinks).
//
// Each size is a namespace of its own with a daemon of its own, built
// before any measurement (the links exist before the daemon starts, as on
// a host that has them), and the sizes take turns block by block, the
// order rotating, so a drift in the machine's load over the run falls on
// all of them alike and cancels in the ratios. Growing one host in one
// daemon, measuring the 2-link case first, would be one daemon but would
// put each size in a different stretch of time, which this 2-core machine
// shared with other work does not keep equal. The daemons that wait their
// turn are idle (nothing changes in their namespaces).
func benchGrowth(t *testing.T, tb *table) {
	t.Run("links", func(t *testing.T) { benchGrowthDriver(t, tb) })
	t.Run("docker", func(t *testing.T) { e2eBench(t, tb, "TestBenchDockerLinks") })
}

func benchGrowthDriver(t *testing.T, tb *table) {
	type host struct {
		links int
		dc    driverCalls
		fl    *floor
	}
	netID := id("g", 0, 0)
	hosts := make([]host, len(growthSizes))
	for k, links := range growthSizes {
		ns := itest.NewNetns(t)
		ns.AddVeth("vp0", "vp0-peer", 1500)
		t0 := time.Now()
		ns.Fill(links - 2)
		if links > 2 {
			t.Logf("host of %s links: filled in %s", thousands(links), time.Since(t0).Round(time.Millisecond))
		}
		d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--log-level", "warn"}})
		d.MustCreateNetwork(itest.Net{ID: netID, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
		hosts[k] = host{links: links, dc: driverCalls{d.Post}, fl: newFloor(t, ns)}
	}

	endpoint := make([]func(i int) error, len(hosts))
	// The kernel's own share: the floor's cycle deleting as Leave does
	// (floor_test.go), in each host's namespace, on the same parent.
	kernel := make([]func(i int) error, len(hosts))
	networkCycle := make([]func(i int) error, len(hosts))
	creates := make([]result, len(hosts)) // CreateNetwork's own latency within the network cycle
	for k, h := range hosts {
		endpoint[k] = func(i int) error {
			return h.dc.endpointCycle(netID, id("c", 0, i), &network.EndpointInterface{Address: fmt.Sprintf("198.18.1.%d/24", 2+i%250)})
		}
		kernel[k] = func(i int) error { return h.fl.endpointCycleUnlisted(0, i) }
		networkCycle[k] = func(i int) error {
			el, err := h.dc.networkCycle(id("n", 0, i), "vp0", "198.18.2.0/30")
			if i < warmUp { // not the warm-up's
				creates[k].lat = append(creates[k].lat, el)
			}
			return err
		}
	}
	t0 := time.Now()
	ep := interleaved(t, "endpoint cycle", 9, 12, endpoint)
	fl := interleaved(t, "floor's endpoint cycle", 9, 12, kernel)
	nw := interleaved(t, "network cycle", 9, 20, networkCycle)
	t.Logf("measured in %s", time.Since(t0).Round(time.Second))

	base := growthSizes[0]
	for k := 1; k < len(hosts); k++ {
		sizes := fmt.Sprintf("%s links vs %s", thousands(hosts[k].links), thousands(base))
		r := float64(ep[k].pct(0.5)) / float64(ep[0].pct(0.5))
		target, v := "", ""
		if hosts[k].links == 8000 {
			target, v = "<= 1.10", verdict(r <= 1.1)
		}
		tb.row("growth", "endpoint cycle c=1 p50, "+sizes, ms(ep[k].pct(0.5)), ms(ep[0].pct(0.5)), fmt.Sprintf("%.2f", r), target, v)
		// What the kernel's own add and delete of the macvlan (and the two
		// commits) grow by on the same hosts: the part no daemon avoids.
		tb.row("growth", "  kernel's share: floor deleting as Leave, p50, "+sizes, ms(fl[k].pct(0.5)), ms(fl[0].pct(0.5)), fmt.Sprintf("%.2f", float64(fl[k].pct(0.5))/float64(fl[0].pct(0.5))), "", "")
		tb.row("growth", "  endpoint cycle against that floor, "+thousands(hosts[k].links)+" links (2 links)", ms(ep[k].pct(0.5)-fl[k].pct(0.5))+" over", ms(ep[0].pct(0.5)-fl[0].pct(0.5))+" over", fmt.Sprintf("%.2f", float64(ep[k].pct(0.5)-fl[k].pct(0.5))/float64(ep[0].pct(0.5)-fl[0].pct(0.5))), "", "")
	}
	for k := 1; k < len(hosts); k++ {
		sizes := fmt.Sprintf("%s links vs %s", thousands(hosts[k].links), thousands(base))
		tb.row("growth", "network cycle c=1 p50, "+sizes, ms(nw[k].pct(0.5)), ms(nw[0].pct(0.5)), fmt.Sprintf("%.2f", float64(nw[k].pct(0.5))/float64(nw[0].pct(0.5))), "", "")
	}
	for k := 1; k < len(hosts); k++ {
		sizes := fmt.Sprintf("%s links vs %s", thousands(hosts[k].links), thousands(base))
		tb.row("growth", "CreateNetwork c=1 p50, "+sizes, ms(creates[k].pct(0.5)), ms(creates[0].pct(0.5)), fmt.Sprintf("%.2f", float64(creates[k].pct(0.5))/float64(creates[0].pct(0.5))), "", "")
	}
}

// interleaved runs each of ops at c=1 in blocks of perBlock calls, the
// ops taking turns block by block and the order rotating from block to
// block (with blocks a multiple of len(ops), each op goes first, second,
// ... equally often), after a warm-up of 3 calls of each, numbered from
// warmUp. Op k's measured calls are numbered 0, 1, ... across its blocks.
func interleaved(t *testing.T, name string, blocks, perBlock int, ops []func(i int) error) []result {
	for _, op := range ops {
		run(1, 3, func(_, i int) error { return op(warmUp + i) })
	}
	out := make([]result, len(ops))
	for b := 0; b < blocks; b++ {
		for j := range ops {
			k := (b + j) % len(ops)
			base := b * perBlock
			out[k].add(run(1, perBlock, func(_, i int) error { return ops[k](base + i) }))
		}
	}
	for k, r := range out {
		if r.failures > 0 {
			t.Errorf("%s, host %d of %d: %d of %d calls failed", name, k+1, len(ops), r.failures, r.ops)
		}
	}
	return out
}

// warmUp numbers interleaved's warm-up calls, above any measured one.
const warmUp = 1 << 24

// thousands formats n with a comma every three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
