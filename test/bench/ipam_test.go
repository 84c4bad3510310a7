//go:build bench

package bench

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// ipamBase is where the benchmark's automatic pools come from (benchmark
// addresses only; nothing is ever configured on a link).
const ipamBase = "198.18.0.0/15"

// benchIPAM drives the IpamDriver of the real binary over its socket:
//   - allocation latency at concurrency 1: RequestPool (automatic) and the
//     gateway's RequestAddress, what `docker network create` asks of an
//     IPAM, against a floor made in this process of what the daemon must
//     do for it (two protocol round trips, the host's addresses and routes
//     read over netlink, two committed bbolt transactions);
//   - RequestAddress throughput at concurrency 1 and 16, blocks
//     alternating, each block on a fresh pool.
func benchIPAM(t *testing.T, tb *table) {
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--log-level", "warn",
		"--default-address-pool", "base=" + ipamBase + ",size=24"}})
	fl := newFloor(t, ns)
	base := netip.MustParsePrefix(ipamBase)

	call := func(route string, req, out any) error {
		code, body, err := d.Post("/IpamDriver."+route, req)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("%s: %d %s", route, code, body)
		}
		if out != nil {
			return json.Unmarshal(body, out)
		}
		return nil
	}
	gatewayOpts := map[string]string{"RequestAddressType": "com.docker.network.gateway"}
	pool := func(opts map[string]string) (ipam.RequestPoolResponse, error) {
		var p ipam.RequestPoolResponse
		err := call("RequestPool", ipam.RequestPoolRequest{AddressSpace: "underlay-local", Options: opts}, &p)
		if err == nil {
			if pp, perr := netip.ParsePrefix(p.Pool); perr != nil || !base.Contains(pp.Addr()) {
				err = fmt.Errorf("pool %q is not in %s", p.Pool, base)
			}
		}
		return p, err
	}
	address := func(poolID string, opts map[string]string) (string, error) {
		var a ipam.RequestAddressResponse
		err := call("RequestAddress", ipam.RequestAddressRequest{PoolID: poolID, Options: opts}, &a)
		return a.Address, err
	}
	alloc := func() (string, error) {
		p, err := pool(nil)
		if err != nil {
			return "", err
		}
		_, err = address(p.PoolID, gatewayOpts)
		return p.PoolID, err
	}
	release := func(id string) error { return call("ReleasePool", ipam.ReleasePoolRequest{PoolID: id}, nil) }

	h := fl.nl[0]
	floorAlloc := func(i int) error {
		for step := 0; step < 2; step++ {
			if err := call("GetCapabilities", nil, nil); err != nil {
				return err
			}
			if _, err := h.AddrList(nil, netlink.FAMILY_ALL); err != nil {
				return err
			}
			if step == 0 {
				if _, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{}, netlink.RT_FILTER_TABLE); err != nil {
					return err
				}
			}
			if err := fl.commit(id("i", step, i)); err != nil {
				return err
			}
		}
		return nil
	}

	// A host with some networks already: 64 pools held.
	for i := 0; i < 64; i++ {
		if _, err := alloc(); err != nil {
			t.Fatal(err)
		}
	}
	// Allocation latency, underlay and floor alternating op by op; each
	// pool is released (untimed) so the state stays the same size.
	var ua, fa result
	const allocRounds = 300
	for i := -10; i < allocRounds; i++ { // 10 warm-up rounds
		t0 := time.Now()
		pid, err := alloc()
		el := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := release(pid); err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		if err := floorAlloc(i + 10); err != nil {
			t.Fatal(err)
		}
		fel := time.Since(t0)
		if i >= 0 {
			ua.lat, fa.lat = append(ua.lat, el), append(fa.lat, fel)
		}
	}

	// RequestAddress throughput: blocks of c=1 and c=16 alternating, each
	// on a fresh /20, every address checked distinct.
	var u1, u16 result
	block := func(workers, perWorker int) result {
		p, err := pool(map[string]string{"size": "20"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := address(p.PoolID, gatewayOpts); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]bool{}
		r := run(workers, perWorker, func(w, i int) error {
			a, err := address(p.PoolID, nil)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[a] {
				return fmt.Errorf("address %s of pool %s handed out twice", a, p.Pool)
			}
			seen[a] = true
			return nil
		})
		if err := release(p.PoolID); err != nil {
			t.Fatal(err)
		}
		return r
	}
	block(1, 10) // warm-up
	for b := 0; b < 4; b++ {
		u1.add(block(1, 160))
		u16.add(block(16, 10))
	}
	for name, r := range map[string]result{"c=1": u1, "c=16": u16} {
		if r.failures > 0 {
			t.Errorf("RequestAddress %s: %d failed operations", name, r.failures)
		}
	}

	r := float64(ua.pct(0.5)) / float64(fa.pct(0.5))
	tb.row("ipam", "alloc (RequestPool auto + gateway) c=1 p50 (vs floor)", ms(ua.pct(0.5)), ms(fa.pct(0.5)), fmt.Sprintf("%.2f", r), "", "")
	tb.row("ipam", "alloc (RequestPool auto + gateway) c=1 p99 (vs floor)", ms(ua.pct(0.99)), ms(fa.pct(0.99)), fmt.Sprintf("%.2f", float64(ua.pct(0.99))/float64(fa.pct(0.99))), "", "")
	tb.row("ipam", "RequestAddress c=1 p50 / p99", ms(u1.pct(0.5))+" / "+ms(u1.pct(0.99)), "", "", "", "")
	tb.row("ipam", "RequestAddress c=16 p50 / p99", ms(u16.pct(0.5))+" / "+ms(u16.pct(0.99)), "", "", "", "")
	scale := u16.opsPerSec() / u1.opsPerSec()
	tb.row("ipam", "RequestAddress ops/s c=16 vs c=1", fmt.Sprintf("%.0f", u16.opsPerSec()), fmt.Sprintf("%.0f", u1.opsPerSec()), fmt.Sprintf("%.2fx", scale), ">= 3x", verdict(scale >= 3))
}
