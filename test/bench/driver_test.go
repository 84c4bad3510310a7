//go:build bench

package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

const parents = 16

func id(prefix string, w, i int) string { return fmt.Sprintf("%s%03x%08x%052d", prefix, w, i, 0) }

// levels are the concurrencies the cycles run at; targets are at 1 and 16.
var levels = []int{1, 4, 16}

// benchDriver drives the real binary over its socket (16 veth parents in a
// namespace, one per worker) against the floor (floor_test.go), blocks
// alternating: the endpoint cycle (CreateEndpoint, Join, Leave,
// DeleteEndpoint) and the network cycle (CreateNetwork, DeleteNetwork on
// an existing parent), at each of levels; and the daemon's own time for
// CreateNetwork from its metrics.
func benchDriver(t *testing.T, tb *table) {
	ns := itest.NewNetns(t)
	for w := 0; w < parents; w++ {
		ns.AddVeth(fmt.Sprintf("vp%d", w), fmt.Sprintf("vp%d-peer", w), 1500)
	}
	args := []string{"--log-level", "warn"}
	profile := os.Getenv("BENCH_PROFILE")
	if profile != "" {
		// CPU, block and mutex profiles of the daemon, written when it
		// stops (docs/benchmarks.md).
		args = append(args, "--profile", profile)
	}
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: args})
	fl := newFloor(t, ns)
	for w := 0; w < parents; w++ {
		d.MustCreateNetwork(itest.Net{ID: id("e", w, 0), Opts: map[string]string{"parent": fmt.Sprintf("vp%d", w)}, V4: []string{fmt.Sprintf("198.18.%d.0/24", w)}})
	}
	dc := driverCalls{d.Post}
	call := dc.call
	// endpointOn is worker w's endpoint cycle i through c.
	endpointOn := func(c driverCalls) func(w, i int) error {
		return func(w, i int) error {
			return c.endpointCycle(id("e", w, 0), id("c", w, i), &network.EndpointInterface{Address: fmt.Sprintf("198.18.%d.%d/24", w, 2+i%250)})
		}
	}
	endpoint := endpointOn(dc)
	networkCycle := func(w, i int) error {
		_, err := dc.networkCycle(id("n", w, i), fmt.Sprintf("vp%d", w), fmt.Sprintf("198.19.%d.%d/30", w, (i%64)*4))
		return err
	}

	if profile != "" {
		// One cycle at c=1 alone: the endpoint cycle, or the network
		// cycle with BENCH_PROFILE_CYCLE=network.
		name, cycle, n := "endpoint", endpoint, 400
		if os.Getenv("BENCH_PROFILE_CYCLE") == "network" {
			name, cycle, n = "network", networkCycle, 3000
		}
		r := run(1, n, cycle)
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		tb.row("driver", name+" cycle c=1 p50, profiled", ms(r.pct(0.5)), "", "", "", "")
		return
	}

	rtt := run(1, 400, func(w, i int) error { return call("GetCapabilities", nil) })
	commit := run(1, 400, func(w, i int) error { return fl.commit(id("k", w, i)) })
	tb.row("driver", "bound: protocol round trip p50", ms(rtt.pct(0.5)), "", "", "", "")
	tb.row("driver", "bound: one bbolt commit p50 (floor's)", ms(commit.pct(0.5)), "", "", "", "")

	ep := measure(t, "endpoint cycle", endpoint, fl.endpointCycle, 8, 40)
	r1 := ep[1].u.opsPerSec() / ep[1].f.opsPerSec()
	p50 := float64(ep[1].u.pct(0.5)) / float64(ep[1].f.pct(0.5))
	r16 := ep[16].u.opsPerSec() / ep[16].f.opsPerSec()
	tb.row("driver", "endpoint cycle c=1 ops/s (vs floor)", ops(ep[1].u), ops(ep[1].f), fmt.Sprintf("%.2f", r1), ">= 0.95", verdict(r1 >= 0.95))
	tb.row("driver", "endpoint cycle c=1 p50 (vs floor)", ms(ep[1].u.pct(0.5)), ms(ep[1].f.pct(0.5)), fmt.Sprintf("%.2f", p50), "<= 1.10", verdict(p50 <= 1.1))
	tb.row("driver", "endpoint cycle c=1 p99 (vs floor)", ms(ep[1].u.pct(0.99)), ms(ep[1].f.pct(0.99)), "", "", "")
	tb.row("driver", "endpoint cycle c=4 ops/s (vs floor)", ops(ep[4].u), ops(ep[4].f), fmt.Sprintf("%.2f", ep[4].u.opsPerSec()/ep[4].f.opsPerSec()), "", "")
	tb.row("driver", "endpoint cycle c=16 ops/s (vs floor)", ops(ep[16].u), ops(ep[16].f), fmt.Sprintf("%.2f", r16), ">= 1.00", verdict(r16 >= 1.0))
	tb.row("driver", "endpoint cycle c=16 p50 / p99 (vs floor)", ms(ep[16].u.pct(0.5))+" / "+ms(ep[16].u.pct(0.99)), ms(ep[16].f.pct(0.5))+" / "+ms(ep[16].f.pct(0.99)), "", "", "")
	// Leave answers once the kernel has unlisted the link, not after its
	// RCU cleanup as the floor's delete does: against a floor deleting the
	// same way, the ratio is what the protocol and the daemon cost.
	// Targets of issue 34: 0.70 at c=1, 1.10 at c=16. In turn with both:
	// at c=1 that floor behind the protocol (serveProtocol), the most a
	// remote driver that does each step within its request can reach,
	// and what of the cost is the daemon's own; at c=16, where that is no
	// bound (a driver may commit concurrent requests' records together,
	// as underlay's store does; the floors commit each alone), the
	// kernel's work alone (kernelCycle: the link's add and delete, no
	// record) for reference.
	protocolFloor := endpointOn(fl.serveProtocol(t))
	un := measureN(t, "endpoint cycle vs unlisted floor", []func(w, i int) error{endpoint, fl.endpointCycleUnlisted, protocolFloor, fl.kernelCycle}, 8, 40)
	for _, lv := range []struct {
		c      int
		target float64
	}{{1, 0.70}, {16, 1.10}} {
		u, f, p, k := un[lv.c][0], un[lv.c][1], un[lv.c][2], un[lv.c][3]
		r := u.opsPerSec() / f.opsPerSec()
		tb.row("driver", fmt.Sprintf("endpoint cycle c=%d ops/s, p50 (vs floor deleting as Leave)", lv.c), ops(u)+", "+ms(u.pct(0.5)), ops(f)+", "+ms(f.pct(0.5)), fmt.Sprintf("%.2f", r), fmt.Sprintf(">= %.2f", lv.target), verdict(r >= lv.target))
		if lv.c == 1 {
			tb.row("driver", "bound: that floor behind the protocol, c=1 ops/s, p50 (vs the floor)", ops(p)+", "+ms(p.pct(0.5)), ops(f)+", "+ms(f.pct(0.5)), fmt.Sprintf("%.2f", p.opsPerSec()/f.opsPerSec()), "", "")
			tb.row("driver", "endpoint cycle c=1 ops/s, p50 (vs that floor behind the protocol)", ops(u)+", "+ms(u.pct(0.5)), ops(p)+", "+ms(p.pct(0.5)), fmt.Sprintf("%.2f", u.opsPerSec()/p.opsPerSec()), "", "")
		} else {
			tb.row("driver", fmt.Sprintf("reference: the link's add and delete alone, no records, c=%d ops/s (vs the floor)", lv.c), ops(k), ops(f), fmt.Sprintf("%.2f", k.opsPerSec()/f.opsPerSec()), "", "")
		}
	}

	nw := measure(t, "network cycle", networkCycle, fl.networkCycle, 6, 80)
	tb.row("driver", "network cycle c=1 p50 (vs floor)", ms(nw[1].u.pct(0.5)), ms(nw[1].f.pct(0.5)), fmt.Sprintf("%.2f", float64(nw[1].u.pct(0.5))/float64(nw[1].f.pct(0.5))), "", "")
	tb.row("driver", "network cycle c=16 ops/s (vs floor)", ops(nw[16].u), ops(nw[16].f), fmt.Sprintf("%.2f", nw[16].u.opsPerSec()/nw[16].f.opsPerSec()), "", "")

	// The daemon's own time for CreateNetwork on an existing parent, from
	// its metrics over a c=1 series: the request's time in the daemon
	// (underlay_request_duration_seconds) against its commit's
	// (underlay_store_commit_seconds, the mean over the same series).
	before := scrape(t, d)
	run(1, 400, func(w, i int) error { return networkCycle(0, 1_000_000+i) })
	after := scrape(t, d)
	const create = `underlay_request_duration_seconds%s{outcome="ok",route="NetworkDriver.CreateNetwork"}`
	own := after.mean(before, fmt.Sprintf(create, "_sum"), fmt.Sprintf(create, "_count"))
	com := after.mean(before, "underlay_store_commit_seconds_sum", "underlay_store_commit_seconds_count")
	tb.row("driver", "CreateNetwork daemon time, existing parent (mean, c=1)", msf(own), msf(com)+" (its commit)", fmt.Sprintf("+%.2f ms", (own-com)*1000), "<= commit + 0.20 ms", verdict(own-com <= 0.0002))

	chart(t, ep)
}

// driverCalls speaks the remote driver protocol to one daemon over its
// socket, in the shapes the sections time.
type driverCalls struct {
	post func(path string, body any) (int, []byte, error) // a daemon's Post, or the protocol floor's
}

// call posts req to /NetworkDriver.route; anything but 200 is an error.
func (c driverCalls) call(route string, req any) error {
	code, body, err := c.post("/NetworkDriver."+route, req)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("%s: %s", route, body)
	}
	return nil
}

// endpointCycle is a container's life on network netID as Docker drives
// it: CreateEndpoint epID with ifc's addresses, Join, Leave,
// DeleteEndpoint.
func (c driverCalls) endpointCycle(netID, epID string, ifc *network.EndpointInterface) error {
	for _, step := range []struct {
		route string
		req   any
	}{
		{"CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: ifc}},
		{"Join", network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/bench"}},
		{"Leave", network.LeaveRequest{NetworkID: netID, EndpointID: epID}},
		{"DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: epID}},
	} {
		if err := c.call(step.route, step.req); err != nil {
			return err
		}
	}
	return nil
}

// networkCycle creates the static network netID on parent with the IPv4
// subnet (default options) and deletes it; it returns CreateNetwork's own
// latency.
func (c driverCalls) networkCycle(netID, parent, subnet string) (create time.Duration, err error) {
	return c.networkCycleWith(netID, map[string]string{"parent": parent}, subnet)
}

// networkCycleWith is networkCycle with the network's options (parent
// among them).
func (c driverCalls) networkCycleWith(netID string, opts map[string]string, subnet string) (create time.Duration, err error) {
	t0 := time.Now()
	err = c.call("CreateNetwork", itest.Net{ID: netID, Opts: opts, V4: []string{subnet}}.Request())
	create = time.Since(t0)
	if err != nil {
		return create, err
	}
	return create, c.call("DeleteNetwork", network.DeleteNetworkRequest{NetworkID: netID})
}

// pair is one concurrency level's underlay and floor series.
type pair struct{ u, f result }

// measure runs u and f at every level in alternating blocks (blocks of
// perBlock operations at c=1, as many per worker at higher levels divided
// by the level, at least 4), after a warm-up of both.
func measure(t *testing.T, name string, u, f func(w, i int) error, blocks, perBlock int) map[int]*pair {
	out := map[int]*pair{}
	for c, rs := range measureN(t, name, []func(w, i int) error{u, f}, blocks, perBlock) {
		out[c] = &pair{u: rs[0], f: rs[1]}
	}
	return out
}

// measureN is measure for any number of series, taking turns in each block
// in an order that changes block by block (rotated every second block, and
// reversed in every other), so that neither who goes first nor who comes
// after whom is always the same (what a series leaves running, such as
// the kernel's cleanup of deleted links, lands on the next); each level's
// results in series' order.
func measureN(t *testing.T, name string, series []func(w, i int) error, blocks, perBlock int) map[int][]result {
	out := map[int][]result{}
	for _, s := range series {
		run(1, 5, s)
	}
	n := 0
	for b := 0; b < blocks; b++ {
		for _, c := range levels {
			if out[c] == nil {
				out[c] = make([]result, len(series))
			}
			per := max(perBlock/c, 4)
			base := n
			for k := range series {
				if b%2 == 1 {
					k = len(series) - 1 - k
				}
				s := (b/2 + k) % len(series)
				out[c][s].add(run(c, per, func(w, i int) error { return series[s](w, base+i) }))
			}
			n += per
		}
	}
	for c, rs := range out {
		for s, r := range rs {
			if r.failures > 0 {
				t.Errorf("%s c=%d: %d operations of series %d failed", name, c, r.failures, s)
			}
		}
	}
	return out
}

func ops(r result) string        { return fmt.Sprintf("%.0f", r.opsPerSec()) }
func msf(seconds float64) string { return fmt.Sprintf("%.2f ms", seconds*1000) }

// metricsText is one scrape of the daemon's /metrics: series -> value.
type metricsText map[string]float64

func scrape(t *testing.T, d *itest.Daemon) metricsText {
	t.Helper()
	return d.Scrape()
}

// mean is (sum - before's sum) / (count - before's count).
func (m metricsText) mean(before metricsText, sum, count string) float64 {
	n := m[count] - before[count]
	if n <= 0 {
		return 0
	}
	return (m[sum] - before[sum]) / n
}
