//go:build bench

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

const parents = 16

func id(prefix string, w, i int) string { return fmt.Sprintf("%s%03x%08x%052d", prefix, w, i, 0) }

// floor does a cycle's netlink calls and one committed bbolt transaction
// directly, in this process: what underlay cannot go below.
type floor struct {
	nl  []*netlink.Handle // one per worker: a handle's socket is not shared
	db  *bolt.DB
	mac net.HardwareAddr
}

func newFloor(t *testing.T, ns *itest.Netns) *floor {
	f := &floor{mac: net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0, 1}}
	for w := 0; w < parents; w++ {
		h, err := netlink.NewHandleAt(ns.Handle(), unix.NETLINK_ROUTE)
		if err != nil {
			t.Fatal(err)
		}
		f.nl = append(f.nl, h)
	}
	db, err := bolt.Open(filepath.Join(t.TempDir(), "floor.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	f.db = db
	t.Cleanup(func() {
		db.Close()
		for _, h := range f.nl {
			h.Close()
		}
	})
	return f
}

func (f *floor) commit(key string) error {
	rec, _ := json.Marshal(map[string]string{"id": key, "link": "x", "mac": f.mac.String()})
	return f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(key), rec) })
}

// endpointCycle: Join (parent lookup, add macvlan), Leave (lookup, delete),
// DeleteEndpoint (lookup), and one commit.
func (f *floor) endpointCycle(w, i int) error {
	h := f.nl[w]
	p, err := h.LinkByName(fmt.Sprintf("vp%d", w))
	if err != nil {
		return err
	}
	name := fmt.Sprintf("flr%03x%08x", w, i)
	mac := append(net.HardwareAddr{}, f.mac...)
	mac[4], mac[5] = byte(w), byte(i)
	if err := h.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: p.Attrs().Index, HardwareAddr: mac}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		return err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.LinkDel(l); err != nil {
		return err
	}
	var nf netlink.LinkNotFoundError
	if _, err := h.LinkByName(name); !errors.As(err, &nf) {
		return fmt.Errorf("link %s still there: %v", name, err)
	}
	return f.commit(name)
}

// networkCycle: CreateNetwork's parent lookup and one commit.
func (f *floor) networkCycle(w, i int) error {
	if _, err := f.nl[w].LinkByName(fmt.Sprintf("vp%d", w)); err != nil {
		return err
	}
	return f.commit(id("f", w, i))
}

func benchDriver(t *testing.T, tb *table) {
	ns := itest.NewNetns(t)
	for w := 0; w < parents; w++ {
		ns.AddVeth(fmt.Sprintf("vp%d", w), fmt.Sprintf("vp%d-peer", w), 1500)
	}
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--log-level", "warn"}})
	fl := newFloor(t, ns)
	for w := 0; w < parents; w++ {
		d.MustCreateNetwork(itest.Net{ID: id("e", w, 0), Opts: map[string]string{"parent": fmt.Sprintf("vp%d", w)}, V4: []string{fmt.Sprintf("198.18.%d.0/24", w)}})
	}
	call := func(route string, req any) error {
		code, body, err := d.Post("/NetworkDriver."+route, req)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("%s: %s", route, body)
		}
		return nil
	}
	underlayEndpoint := func(w, i int) error {
		netID, ep := id("e", w, 0), id("c", w, i)
		for _, step := range []struct {
			route string
			req   any
		}{
			{"CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: ep, Interface: &network.EndpointInterface{Address: fmt.Sprintf("198.18.%d.%d/24", w, 2+i%250)}}},
			{"Join", network.JoinRequest{NetworkID: netID, EndpointID: ep, SandboxKey: "/var/run/docker/netns/bench"}},
			{"Leave", network.LeaveRequest{NetworkID: netID, EndpointID: ep}},
			{"DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: ep}},
		} {
			if err := call(step.route, step.req); err != nil {
				return err
			}
		}
		return nil
	}
	underlayNetwork := func(w, i int) error {
		netID := id("n", w, i)
		if err := call("CreateNetwork", itest.Net{ID: netID, Opts: map[string]string{"parent": fmt.Sprintf("vp%d", w)}, V4: []string{fmt.Sprintf("198.19.%d.%d/30", w, (i%64)*4)}}.Request()); err != nil {
			return err
		}
		return call("DeleteNetwork", network.DeleteNetworkRequest{NetworkID: netID})
	}

	type series struct{ u1, f1, u16, f16 result }
	measure := func(name string, u, f func(w, i int) error, blocks, per1, per16 int) series {
		var s series
		// Warm up both.
		run(1, 5, u)
		run(1, 5, f)
		n := 0
		for b := 0; b < blocks; b++ {
			s.u1.add(run(1, per1, func(w, i int) error { return u(w, n+i) }))
			s.f1.add(run(1, per1, func(w, i int) error { return f(w, n+i) }))
			s.u16.add(run(parents, per16, func(w, i int) error { return u(w, n+i) }))
			s.f16.add(run(parents, per16, func(w, i int) error { return f(w, n+i) }))
			n += per1 + per16
		}
		for _, r := range []result{s.u1, s.f1, s.u16, s.f16} {
			if r.failures > 0 {
				t.Errorf("%s: %d failed operations", name, r.failures)
			}
		}
		return s
	}
	report := func(name string, s series) {
		r1 := float64(s.u1.pct(0.5)) / float64(s.f1.pct(0.5))
		tb.row("driver", name+" c=1 p50 (vs floor)", ms(s.u1.pct(0.5)), ms(s.f1.pct(0.5)), fmt.Sprintf("%.2f", r1), "<= 1.30", verdict(r1 <= 1.3))
		tb.row("driver", name+" c=1 p99 (vs floor)", ms(s.u1.pct(0.99)), ms(s.f1.pct(0.99)), fmt.Sprintf("%.2f", float64(s.u1.pct(0.99))/float64(s.f1.pct(0.99))), "", "")
		tb.row("driver", name+" c=1 ops/s (vs floor)", fmt.Sprintf("%.0f", s.u1.opsPerSec()), fmt.Sprintf("%.0f", s.f1.opsPerSec()), fmt.Sprintf("%.2f", s.f1.opsPerSec()/s.u1.opsPerSec()), "", "")
		tb.row("driver", name+" c=16 p50/p99 (vs floor)", ms(s.u16.pct(0.5))+" / "+ms(s.u16.pct(0.99)), ms(s.f16.pct(0.5))+" / "+ms(s.f16.pct(0.99)), "", "", "")
		scale := s.u16.opsPerSec() / s.u1.opsPerSec()
		tb.row("driver", name+" ops/s c=16 vs c=1", fmt.Sprintf("%.0f", s.u16.opsPerSec()), fmt.Sprintf("%.0f", s.u1.opsPerSec()), fmt.Sprintf("%.2fx", scale), ">= 3x", verdict(scale >= 3))
		tb.row("driver", name+" floor ops/s c=16 vs c=1", fmt.Sprintf("%.0f", s.f16.opsPerSec()), fmt.Sprintf("%.0f", s.f1.opsPerSec()), fmt.Sprintf("%.2fx", s.f16.opsPerSec()/s.f1.opsPerSec()), "", "")
	}
	// What bounds a network cycle: two durable commits (create, delete)
	// where the floor has one, and two protocol round trips.
	rtt := run(1, 400, func(w, i int) error { return call("GetCapabilities", nil) })
	commit := run(1, 400, func(w, i int) error { return fl.commit(id("k", w, i)) })
	tb.row("driver", "bound: protocol round trip p50", ms(rtt.pct(0.5)), "", "", "", "")
	tb.row("driver", "bound: one bbolt commit p50", ms(commit.pct(0.5)), "", "", "", "")
	report("endpoint cycle", measure("endpoint cycle", underlayEndpoint, fl.endpointCycle, 6, 25, 6))
	report("network cycle", measure("network cycle", underlayNetwork, fl.networkCycle, 6, 50, 12))
}
