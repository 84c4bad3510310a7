package ipam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// fakeHost is the host as the IPAM reads it: links, addresses, routes.
type fakeHost struct {
	mu     sync.Mutex
	links  []kernel.Link
	addrs  []kernel.Addr
	routes []kernel.Route
}

// newHost has lo (1) and eth0 (2) with the given "index addr/len" and
// routes added by the callers.
func newHost() *fakeHost {
	return &fakeHost{links: []kernel.Link{{Name: "lo", Index: 1, Kind: "device", Encap: "loopback"}, {Name: "eth0", Index: 2, Kind: "device"}, {Name: "eth1", Index: 3, Kind: "device"}}}
}

func (h *fakeHost) List(context.Context) ([]kernel.Link, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]kernel.Link(nil), h.links...), nil
}

func (h *fakeHost) Get(_ context.Context, name string) (kernel.Link, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := kernel.FindLink(h.links, name); ok {
		return l, nil
	}
	return kernel.Link{}, fmt.Errorf("%w: %s", netlinkutil.ErrNotFound, name)
}

func (h *fakeHost) LinkByIndex(_ context.Context, index int) (kernel.Link, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.links {
		if l.Index == index {
			return l, nil
		}
	}
	return kernel.Link{}, fmt.Errorf("%w: index %d", netlinkutil.ErrNotFound, index)
}

func (h *fakeHost) AddrsNear(_ context.Context, pool netip.Prefix) ([]kernel.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []kernel.Addr
	for _, a := range h.addrs {
		if a.Prefix.Masked().Overlaps(pool) {
			out = append(out, a)
		}
	}
	return out, nil
}

// altname gives the link of index an alternative name.
func (h *fakeHost) altname(index int, name string) *fakeHost {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.links {
		if h.links[i].Index == index {
			h.links[i].AltNames = append(h.links[i].AltNames, name)
		}
	}
	return h
}

// rename renames the link of index.
func (h *fakeHost) rename(index int, name string) *fakeHost {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.links {
		if h.links[i].Index == index {
			h.links[i].Name = name
		}
	}
	return h
}

func (h *fakeHost) Addrs(context.Context) ([]kernel.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]kernel.Addr(nil), h.addrs...), nil
}

func (h *fakeHost) Routes(context.Context) ([]kernel.Route, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]kernel.Route(nil), h.routes...), nil
}

func (h *fakeHost) addr(link int, prefix string) *fakeHost {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addrs = append(h.addrs, kernel.Addr{Prefix: pfx(prefix), LinkIndex: link})
	return h
}

// route adds a route of table (0 means main) to dst, via gw when not "".
func (h *fakeHost) route(link, table int, dst, gw string) *fakeHost {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := kernel.Route{Dst: pfx(dst), LinkIndex: link, Table: table}
	if table == 0 {
		r.Table = 254
	}
	if gw != "" {
		r.Gateway = netip.MustParseAddr(gw)
	}
	h.routes = append(h.routes, r)
	return h
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// env is an IPAM over a fake host, a fake clock and a real state file.
type env struct {
	m     *IPAM
	db    *store.DB
	path  string
	host  *fakeHost
	clock *fakeclock.Clock
	cfg   Config
	// nameservers is what a Config.Nameservers reading it returns.
	nameservers []netip.Addr
}

func newEnv(t *testing.T, host *fakeHost, mod func(*Config)) *env {
	t.Helper()
	e := &env{path: filepath.Join(t.TempDir(), "state.db"), host: host, clock: fakeclock.New(t0)}
	if e.host == nil {
		e.host = newHost()
	}
	e.cfg = Config{Host: e.host, Now: e.clock.Now, Reservation: time.Minute}
	if mod != nil {
		mod(&e.cfg)
	}
	e.open(t)
	t.Cleanup(func() { e.db.Close() })
	return e
}

// open (re)opens the state file and makes a new IPAM over it.
func (e *env) open(t *testing.T) {
	t.Helper()
	db, err := store.Open(e.path, store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	cfg := e.cfg
	cfg.Store = db
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
}

func (e *env) reopen(t *testing.T) {
	t.Helper()
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	e.open(t)
}

var ctx = context.Background()

func (e *env) pool(t *testing.T, space, pool, sub string, opts map[string]string, v6 bool) store.IPAMPool {
	t.Helper()
	p, err := e.m.RequestPool(ctx, space, pool, sub, opts, v6)
	if err != nil {
		t.Fatalf("RequestPool(%q, %q, %q, %v, v6=%v): %v", space, pool, sub, opts, v6, err)
	}
	return p
}

func (e *env) auto(t *testing.T) store.IPAMPool {
	t.Helper()
	return e.pool(t, "", "", "", nil, false)
}

func (e *env) address(t *testing.T, poolID, want string, opts map[string]string) netip.Prefix {
	t.Helper()
	a, err := e.m.RequestAddress(ctx, poolID, want, opts)
	if err != nil {
		t.Fatalf("RequestAddress(%s, %q, %v): %v", poolID, want, opts, err)
	}
	return a
}

func (e *env) record(t *testing.T, id string) (store.IPAMPool, bool) {
	t.Helper()
	var rec store.IPAMPool
	var ok bool
	if err := e.db.View(func(tx *store.Tx) (err error) { rec, ok, err = tx.IPAMPool(id); return err }); err != nil {
		t.Fatal(err)
	}
	return rec, ok
}

var gwOpts = map[string]string{keyRequestType: typeGateway}

// wantErr checks err wraps kind and mentions every word.
func wantErr(t *testing.T, err, kind error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %v mentioning %q", kind, words)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Fatalf("error %q does not wrap %v", err, kind)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err, w)
		}
	}
}

func TestNewNeedsStoreAndHost(t *testing.T) {
	if _, err := New(Config{Host: newHost()}); err == nil {
		t.Fatal("New without a store")
	}
	if _, err := New(Config{Store: fakeStoreNil{}}); err == nil {
		t.Fatal("New without a host")
	}
}

type fakeStoreNil struct{}

func (fakeStoreNil) View(func(*store.Tx) error) error  { return nil }
func (fakeStoreNil) Batch(func(*store.Tx) error) error { return nil }

func TestExplicitPool(t *testing.T) {
	type held struct{ space, pool, parent string }
	for _, tc := range []struct {
		name                string
		held                []held
		space, pool, parent string
		want                string
		conflict            int // index+1 of the held pool named in the refusal
	}{
		{name: "canonical form", pool: "10.0.0.77/24", want: "10.0.0.0/24"},
		{name: "IPv4 /30", pool: "10.0.0.7/30", want: "10.0.0.4/30"},
		{name: "disjoint", held: []held{{"", "10.0.0.0/24", ""}}, pool: "10.0.1.0/24", want: "10.0.1.0/24"},
		{name: "same pool refused", held: []held{{"", "10.0.0.0/24", ""}}, pool: "10.0.0.0/24", conflict: 1},
		{name: "inside refused", held: []held{{"", "10.0.0.0/24", ""}, {"", "10.1.0.0/16", ""}}, pool: "10.1.2.0/24", conflict: 2},
		{name: "around refused", held: []held{{"", "10.0.0.0/24", ""}}, pool: "10.0.0.0/8", conflict: 1},
		{name: "same parent refused", held: []held{{"", "10.0.0.0/24", "eth0"}}, pool: "10.0.0.0/25", parent: "eth0", conflict: 1},
		{name: "other parent allowed", held: []held{{"", "10.0.0.0/24", "eth0"}}, pool: "10.0.0.0/24", parent: "eth1", want: "10.0.0.0/24"},
		{name: "parent and no parent allowed", held: []held{{"", "10.0.0.0/24", ""}}, pool: "10.0.0.0/24", parent: "eth1", want: "10.0.0.0/24"},
		{name: "other space allowed", held: []held{{GlobalSpace, "10.0.0.0/24", ""}}, space: LocalSpace, pool: "10.0.0.0/24", want: "10.0.0.0/24"},
		{name: "default space is local", held: []held{{LocalSpace, "10.0.0.0/24", ""}}, pool: "10.0.0.0/24", conflict: 1},
		{name: "IPv6 overlap refused", held: []held{{"", "2001:db8::/48", ""}}, pool: "2001:db8:0:1::/64", conflict: 1},
		{name: "IPv6 disjoint", held: []held{{"", "2001:db8::/48", ""}}, pool: "2001:db8:1::/64", want: "2001:db8:1::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			var ids []store.IPAMPool
			for _, h := range tc.held {
				var opts map[string]string
				if h.parent != "" {
					opts = map[string]string{OptParent: h.parent}
				}
				ids = append(ids, e.pool(t, h.space, h.pool, "", opts, strings.Contains(h.pool, ":")))
			}
			var opts map[string]string
			if tc.parent != "" {
				opts = map[string]string{OptParent: tc.parent}
			}
			got, err := e.m.RequestPool(ctx, tc.space, tc.pool, "", opts, strings.Contains(tc.pool, ":"))
			if tc.conflict > 0 {
				h := ids[tc.conflict-1]
				wantErr(t, err, pluginapi.ErrConflict, h.Prefix, h.ID, tc.pool)
				return
			}
			if err != nil || got.Prefix != tc.want || got.Auto || got.Pending != nil || got.Parent != tc.parent {
				t.Fatalf("RequestPool = %+v, %v; want %s", got, err, tc.want)
			}
			if rec, ok := e.record(t, got.ID); !ok || rec.Prefix != tc.want {
				t.Fatalf("stored %+v %v", rec, ok)
			}
		})
	}
}

func TestExplicitPoolAndReservations(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.Bases = []Base{base("10.0.0.0/16", 24)} })
	res := e.auto(t) // 10.0.0.0/24, pending
	if res.Prefix != "10.0.0.0/24" || res.Pending == nil {
		t.Fatalf("auto = %+v", res)
	}
	_, err := e.m.RequestPool(ctx, "", "10.0.0.0/23", "", nil, false)
	wantErr(t, err, pluginapi.ErrConflict, res.ID, "10.0.0.0/24")

	// Expired, the reservation is free: the explicit pool gets it, and the
	// expired record is gone, so a CreateNetwork naming the prefix
	// confirms only the new pool.
	e.clock.Advance(time.Minute)
	p := e.pool(t, "", "10.0.0.0/23", "", nil, false)
	if _, ok := e.record(t, res.ID); ok {
		t.Fatal("the expired reservation survived a pool that took its place")
	}
	if _, err := e.m.RequestAddress(ctx, res.ID, "", nil); !errors.Is(err, pluginapi.ErrNotFound) {
		t.Fatalf("RequestAddress on the expired reservation: %v", err)
	}
	if p.Prefix != "10.0.0.0/23" {
		t.Fatalf("explicit = %+v", p)
	}
	res2 := e.auto(t) // 10.0.2.0/24
	e.clock.Advance(time.Minute)
	q := e.pool(t, "", "10.0.2.0/24", "", nil, false)
	if err := e.db.Batch(func(tx *store.Tx) error { return tx.ConfirmIPAMPools(LocalSpace, q.Prefix) }); err != nil {
		t.Fatal(err)
	}
	var live []string
	if err := e.db.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, h := range pools {
			if h.Prefix == q.Prefix && !h.Expired(e.clock.Now()) {
				live = append(live, h.ID)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0] != q.ID {
		t.Fatalf("live pools of %s after CreateNetwork: %v (explicit %s, expired reservation %s)", q.Prefix, live, q.ID, res2.ID)
	}
}

func TestParentPool(t *testing.T) {
	host := func() *fakeHost {
		return newHost().
			addr(1, "127.0.0.1/8").
			addr(2, "fe80::1/64").
			addr(2, "192.168.1.10/24").
			addr(2, "192.168.1.11/24"). // a second address in the LAN
			addr(3, "10.9.0.2/16").
			route(2, 0, "192.168.1.0/24", "").
			route(3, 0, "0.0.0.0/0", "10.9.0.1").        // default route via another link
			route(2, 100, "0.0.0.0/0", "192.168.1.254"). // a policy table's: not the LAN's gateway
			route(2, 0, "0.0.0.0/0", "192.168.1.1").
			route(2, 0, "::/0", "fe80::9")
	}
	e := newEnv(t, host(), nil)
	p := e.pool(t, "", "", "", map[string]string{OptParent: "eth0"}, false)
	if p.Prefix != "192.168.1.0/24" || p.Gateway != "192.168.1.1" || p.Parent != "eth0" || p.Auto || p.Pending != nil {
		t.Fatalf("parent pool = %+v", p)
	}
	// The LAN gateway and the host's addresses are never handed out.
	var got []string
	for i := 0; i < 11; i++ {
		got = append(got, e.address(t, p.ID, "", nil).String())
	}
	if want := "192.168.1.2/24 192.168.1.3/24 192.168.1.4/24 192.168.1.5/24 192.168.1.6/24 192.168.1.7/24 192.168.1.8/24 192.168.1.9/24 192.168.1.12/24 192.168.1.13/24 192.168.1.14/24"; strings.Join(got, " ") != want {
		t.Fatalf("addresses %v, want %s", got, want)
	}
	_, err := e.m.RequestAddress(ctx, p.ID, "192.168.1.10", nil)
	wantErr(t, err, pluginapi.ErrConflict, "192.168.1.10")
	_, err = e.m.RequestAddress(ctx, p.ID, "192.168.1.1", nil)
	wantErr(t, err, pluginapi.ErrConflict, "192.168.1.1")
	// The gateway asked for: the LAN's, with or without naming it.
	if a := e.address(t, p.ID, "", gwOpts); a.String() != "192.168.1.1/24" {
		t.Fatalf("gateway %v", a)
	}
	if err := e.m.ReleaseAddress(ctx, p.ID, "192.168.1.1"); err != nil {
		t.Fatal(err)
	}
	if a := e.address(t, p.ID, "192.168.1.1", gwOpts); a.String() != "192.168.1.1/24" {
		t.Fatalf("named gateway %v", a)
	}

	// Over HTTP, Data carries the gateway in CIDR form.
	e2 := newEnv(t, host(), nil)
	var resp struct {
		PoolID string
		Pool   string
		Data   map[string]string
	}
	call(t, e2.m, "RequestPool", `{"AddressSpace":"underlay-local","Options":{"parent":"eth0"}}`, http.StatusOK, &resp)
	if resp.Pool != "192.168.1.0/24" || resp.Data[dataGateway] != "192.168.1.1/24" || resp.PoolID == "" {
		t.Fatalf("RequestPool answer %+v", resp)
	}

	for _, tc := range []struct {
		name    string
		host    *fakeHost
		parent  string
		sub     string
		v6      bool
		pool    string
		gateway string
		err     error
		words   []string
	}{
		{name: "no default route via it", host: newHost().addr(2, "192.168.1.10/24").route(3, 0, "0.0.0.0/0", "10.9.0.1"), parent: "eth0", pool: "192.168.1.0/24"},
		{name: "default route's gateway outside the LAN", host: newHost().addr(2, "192.168.1.10/24").route(2, 0, "0.0.0.0/0", "10.1.1.1"), parent: "eth0", pool: "192.168.1.0/24"},
		{name: "a non-default route via a gateway is not the gateway", host: newHost().addr(2, "192.168.1.10/24").route(2, 0, "10.0.0.0/8", "192.168.1.254"), parent: "eth0", pool: "192.168.1.0/24"},
		{name: "default route without gateway", host: newHost().addr(2, "192.168.1.10/24").route(2, 0, "0.0.0.0/0", ""), parent: "eth0", pool: "192.168.1.0/24"},
		{name: "range inside the LAN", host: host(), parent: "eth0", sub: "192.168.1.128/25", pool: "192.168.1.0/24", gateway: "192.168.1.1"},
		{name: "range outside the LAN", host: host(), parent: "eth0", sub: "192.168.2.0/25", err: pluginapi.ErrInvalid, words: []string{"192.168.2.0/25", "192.168.1.0/24"}},
		{name: "range wider than the LAN", host: newHost().addr(2, "10.0.0.10/24"), parent: "eth0", sub: "10.0.0.0/16", err: pluginapi.ErrInvalid, words: []string{"10.0.0.0/16", "10.0.0.0/24"}},
		{name: "a candidate list is the driver's", host: host(), parent: "eth0,ens3", err: pluginapi.ErrInvalid, words: []string{"parent=eth0,ens3", "one interface", "-o parent"}},
		{name: "auto is the driver's", host: host(), parent: "auto.10", err: pluginapi.ErrInvalid, words: []string{"parent=auto.10", "one interface"}},
		{name: "no such interface", host: host(), parent: "nope0", err: pluginapi.ErrInvalid, words: []string{"parent=nope0", "no such interface"}},
		{name: "no IPv4 address", host: newHost().addr(2, "2001:db8::1/64"), parent: "eth0", err: pluginapi.ErrInvalid, words: []string{"eth0", "no IPv4 address", "--subnet"}},
		{name: "only a /32", host: newHost().addr(2, "192.168.1.10/32"), parent: "eth0", err: pluginapi.ErrInvalid, words: []string{"no IPv4 address"}},
		{name: "IPv6 needs a subnet", host: host(), parent: "eth0", v6: true, err: pluginapi.ErrInvalid, words: []string{"parent=eth0", "--subnet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.host, nil)
			got, err := e.m.RequestPool(ctx, "", "", tc.sub, map[string]string{OptParent: tc.parent}, tc.v6)
			if tc.err != nil {
				wantErr(t, err, tc.err, tc.words...)
				return
			}
			if err != nil || got.Prefix != tc.pool || got.Gateway != tc.gateway || got.Range != tc.sub {
				t.Fatalf("RequestPool = %+v, %v; want %s gateway %q", got, err, tc.pool, tc.gateway)
			}
			if tc.sub != "" {
				if a := e.address(t, got.ID, "", nil); a.String() != "192.168.1.128/24" {
					t.Fatalf("first address of the range %v", a)
				}
			}
		})
	}

	// A second network on the same parent LAN is an overlap; another space
	// is not.
	_, err = e.m.RequestPool(ctx, "", "", "", map[string]string{OptParent: "eth0"}, false)
	wantErr(t, err, pluginapi.ErrConflict, p.ID, "192.168.1.0/24")
	e.pool(t, GlobalSpace, "", "", map[string]string{OptParent: "eth0"}, false)
}

func TestAutoPoolAvoids(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(e *env, t *testing.T)
		want  string
	}{
		{name: "nothing", want: "10.0.0.0/24"},
		{name: "a host address (not its whole prefix)", plant: func(e *env, _ *testing.T) { e.host.addr(2, "10.0.0.5/8") }, want: "10.0.1.0/24"},
		{name: "a host address on loopback", plant: func(e *env, _ *testing.T) { e.host.addr(1, "10.0.0.1/32") }, want: "10.0.1.0/24"},
		{name: "an on-link route", plant: func(e *env, _ *testing.T) { e.host.route(2, 0, "10.0.0.0/23", "") }, want: "10.0.2.0/24"},
		{name: "a route via a gateway", plant: func(e *env, _ *testing.T) { e.host.route(2, 0, "10.0.0.0/24", "192.168.1.1") }, want: "10.0.1.0/24"},
		{name: "a route of another table", plant: func(e *env, _ *testing.T) { e.host.route(2, 100, "10.0.0.128/25", "") }, want: "10.0.1.0/24"},
		{name: "a route of the local table", plant: func(e *env, _ *testing.T) { e.host.route(2, 255, "10.0.0.255/32", "") }, want: "10.0.1.0/24"},
		{name: "a route around the base", plant: func(e *env, _ *testing.T) { e.host.route(2, 0, "10.0.0.0/8", "192.168.1.1") }, want: ""},
		{name: "not a default route, even via a gateway in the base", plant: func(e *env, _ *testing.T) {
			e.host.route(2, 0, "0.0.0.0/0", "10.0.0.1").route(2, 100, "0.0.0.0/0", "").route(2, 0, "::/0", "fe80::1")
		}, want: "10.0.0.0/24"},
		{name: "an IPv6 route does not matter", plant: func(e *env, _ *testing.T) { e.host.route(2, 0, "::/1", "") }, want: "10.0.0.0/24"},
		{name: "a nameserver", plant: func(e *env, _ *testing.T) { e.nameservers = []netip.Addr{netip.MustParseAddr("10.0.0.53")} }, want: "10.0.1.0/24"},
		{name: "a held explicit pool, other parent and space", plant: func(e *env, t *testing.T) {
			e.pool(t, GlobalSpace, "10.0.0.0/23", "", map[string]string{OptParent: "eth1"}, false)
		}, want: "10.0.2.0/24"},
		{name: "a confirmed auto pool", plant: func(e *env, t *testing.T) {
			p := e.auto(t)
			e.address(t, p.ID, "", gwOpts)
			e.clock.Advance(time.Hour)
		}, want: "10.0.1.0/24"},
		{name: "an unexpired reservation", plant: func(e *env, t *testing.T) {
			e.auto(t)
			e.clock.Advance(time.Minute - time.Nanosecond)
		}, want: "10.0.1.0/24"},
		{name: "not an expired reservation", plant: func(e *env, t *testing.T) {
			e.auto(t)
			e.clock.Advance(time.Minute)
		}, want: "10.0.0.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *env
			e = newEnv(t, nil, func(c *Config) {
				c.Bases = []Base{base("10.0.0.0/16", 24)}
				c.Nameservers = func() []netip.Addr { return e.nameservers }
			})
			if tc.plant != nil {
				tc.plant(e, t)
			}
			got, err := e.m.RequestPool(ctx, "", "", "", nil, false)
			if tc.want == "" {
				wantErr(t, err, pluginapi.ErrConflict, "base=10.0.0.0/16,size=24", "--default-address-pool")
				return
			}
			if err != nil || got.Prefix != tc.want || !got.Auto || got.Pending == nil || !got.Pending.Deadline.Equal(e.clock.Now().Add(time.Minute)) {
				t.Fatalf("auto pool = %+v, %v; want %s reserved for a minute", got, err, tc.want)
			}
		})
	}
}

func TestAutoPoolSizeAndBases(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) {
		c.Bases = []Base{base("192.168.0.0/16", 24), base("10.0.0.0/23", 24), base("fd00:1::/48", 64)}
	})
	for _, want := range []string{"10.0.0.0/24", "10.0.1.0/24", "192.168.0.0/24"} {
		if p := e.auto(t); p.Prefix != want {
			t.Fatalf("auto = %s, want %s", p.Prefix, want)
		}
	}
	if p := e.pool(t, "", "", "", map[string]string{OptSize: "/26"}, false); p.Prefix != "192.168.1.0/26" {
		t.Fatalf("size=/26: %s", p.Prefix)
	}
	// 10.0.0.0/23 is too small for a /16, 192.168.0.0/16 holds pools.
	_, err := e.m.RequestPool(ctx, "", "", "", map[string]string{OptSize: "16"}, false)
	wantErr(t, err, pluginapi.ErrConflict, "/16", "base=192.168.0.0/16,size=24 base=10.0.0.0/23,size=24")
}

func TestAutoPoolSizeExhausted(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.Bases = []Base{base("10.0.0.0/23", 24)} })
	e.auto(t)
	_, err := e.m.RequestPool(ctx, "", "", "", map[string]string{OptSize: "23"}, false)
	wantErr(t, err, pluginapi.ErrConflict, "/23", "base=10.0.0.0/23,size=24", "--default-address-pool")
	e.auto(t)
	_, err = e.m.RequestPool(ctx, "", "", "", nil, false)
	wantErr(t, err, pluginapi.ErrConflict, "base=10.0.0.0/23,size=24", "--default-address-pool")
	if strings.Contains(err.Error(), "/0 ") {
		t.Fatalf("error %q names a /0", err)
	}
}

func TestAutoPoolIPv6(t *testing.T) {
	e := newEnv(t, nil, nil) // the default bases: IPv4 only
	_, err := e.m.RequestPool(ctx, "", "", "", nil, true)
	wantErr(t, err, pluginapi.ErrInvalid, "IPv6", "--default-address-pool")

	host := newHost().addr(2, "fd00:1::1/64").route(2, 0, "fd00:1:0:1::/64", "").route(2, 0, "::/0", "fd00:1::9")
	e = newEnv(t, host, func(c *Config) { c.Bases = append(DefaultBases(), base("fd00:1::/48", 64)) })
	p := e.pool(t, "", "", "", nil, true)
	if p.Prefix != "fd00:1:0:2::/64" || p.Pending == nil {
		t.Fatalf("IPv6 auto = %+v", p)
	}
	if a := e.address(t, p.ID, "", gwOpts); a.String() != "fd00:1:0:2::1/64" {
		t.Fatalf("IPv6 gateway %v", a)
	}
	if a := e.address(t, p.ID, "", nil); a.String() != "fd00:1:0:2::2/64" {
		t.Fatalf("IPv6 address %v", a)
	}
	if p := e.pool(t, "", "", "", map[string]string{OptSize6: "56", OptSize: "26"}, true); p.Prefix != "fd00:1:0:100::/56" {
		t.Fatalf("IPv6 size6=56 (size=26 is IPv4's): %s", p.Prefix)
	}
	if p := e.auto(t); p.Prefix != "172.16.0.0/24" {
		t.Fatalf("IPv4 beside IPv6 bases: %s", p.Prefix)
	}
}

func TestConcurrentAutoPools(t *testing.T) {
	e := newEnv(t, newHost().addr(2, "172.16.3.1/24"), nil)
	const n = 32
	pools := make([]store.IPAMPool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			pools[i], errs[i] = e.m.RequestPool(ctx, "", "", "", nil, false)
		}(i)
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, p := range pools {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		pp := pfx(p.Prefix)
		if pp.Bits() != 24 || !pfx("172.16.0.0/12").Contains(pp.Addr()) || pp.Contains(netip.MustParseAddr("172.16.3.1")) {
			t.Fatalf("pool %s", p.Prefix)
		}
		for j := 0; j < i; j++ {
			if pfx(pools[j].Prefix).Overlaps(pp) {
				t.Fatalf("pools %d and %d overlap: %s %s", i, j, pools[j].Prefix, p.Prefix)
			}
		}
		seen[p.ID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct IDs", len(seen))
	}
	// The lowest 33 /24s but the host's.
	if p := e.auto(t); p.Prefix != "172.16.33.0/24" {
		t.Fatalf("next auto pool %s", p.Prefix)
	}
}

func TestConcurrentAddresses(t *testing.T) {
	e := newEnv(t, newHost().addr(2, "10.0.0.7/24"), nil)
	p := e.pool(t, "", "10.0.0.0/25", "", nil, false)
	const n = 64
	addrs := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			addrs[i], errs[i] = e.m.RequestAddress(ctx, p.ID, "", nil)
		}(i)
	}
	wg.Wait()
	seen := map[netip.Prefix]bool{}
	for i, a := range addrs {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if seen[a] || !usable(pfx("10.0.0.0/25"), a.Addr()) || a.Addr() == netip.MustParseAddr("10.0.0.7") || a.Bits() != 25 {
			t.Fatalf("address %v (seen %v)", a, seen[a])
		}
		seen[a] = true
	}
	// 126 usable, one the host's, 64 handed out: the next is .66.
	if a := e.address(t, p.ID, "", nil); a.String() != "10.0.0.66/25" {
		t.Fatalf("next address %v", a)
	}
}

func TestReservationConfirmed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		confirm func(e *env, t *testing.T, p store.IPAMPool)
	}{
		{name: "by its first address", confirm: func(e *env, t *testing.T, p store.IPAMPool) { e.address(t, p.ID, "", nil) }},
		{name: "by its gateway", confirm: func(e *env, t *testing.T, p store.IPAMPool) { e.address(t, p.ID, "", gwOpts) }},
		{name: "by a CreateNetwork naming it", confirm: func(e *env, t *testing.T, p store.IPAMPool) {
			if err := e.db.Batch(func(tx *store.Tx) error { return tx.ConfirmIPAMPools(LocalSpace, p.Prefix) }); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "by a CreateNetwork naming it unmasked", confirm: func(e *env, t *testing.T, p store.IPAMPool) {
			if err := e.db.Batch(func(tx *store.Tx) error { return tx.ConfirmIPAMPools(LocalSpace, "172.16.0.1/24") }); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			p := e.auto(t)
			e.clock.Advance(30 * time.Second)
			tc.confirm(e, t, p)
			if rec, ok := e.record(t, p.ID); !ok || rec.Pending != nil || !rec.Auto {
				t.Fatalf("after confirmation: %+v %v", rec, ok)
			}
			e.clock.Advance(time.Hour)
			if q := e.auto(t); q.Prefix == p.Prefix {
				t.Fatalf("a confirmed pool %s was handed out again", p.Prefix)
			}
			if _, ok := e.record(t, p.ID); !ok {
				t.Fatal("a confirmed pool was dropped")
			}
			e.address(t, p.ID, "", nil)
		})
	}

	// A CreateNetwork naming another prefix confirms nothing.
	e := newEnv(t, nil, nil)
	p := e.auto(t)
	if err := e.db.Batch(func(tx *store.Tx) error { return tx.ConfirmIPAMPools(LocalSpace, "172.16.1.0/24") }); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if q := e.auto(t); q.Prefix != p.Prefix {
		t.Fatalf("unconfirmed reservation %s not free after its deadline: got %s", p.Prefix, q.Prefix)
	}
}

func TestExpiredReservation(t *testing.T) {
	e := newEnv(t, nil, nil)
	p := e.auto(t)
	e.clock.Advance(time.Minute)
	// Nothing took it yet: Docker may still use it.
	e.address(t, p.ID, "", nil)
	if rec, _ := e.record(t, p.ID); rec.Pending != nil {
		t.Fatalf("revived reservation still pending: %+v", rec)
	}

	q := e.auto(t)
	e.clock.Advance(time.Minute)
	r := e.auto(t) // takes q's place
	if r.Prefix != q.Prefix {
		t.Fatalf("expired %s not reused: %s", q.Prefix, r.Prefix)
	}
	_, err := e.m.RequestAddress(ctx, q.ID, "", nil)
	wantErr(t, err, pluginapi.ErrNotFound, q.ID)
}

func TestReopenKeepsReservationsAndAddresses(t *testing.T) {
	e := newEnv(t, nil, nil)
	res := e.auto(t) // 172.16.0.0/24 until t0+1m
	used := e.pool(t, "", "10.0.0.0/24", "", nil, false)
	a1 := e.address(t, used.ID, "", gwOpts)
	a2 := e.address(t, used.ID, "", nil)
	a3 := e.address(t, used.ID, "10.0.0.77", nil)

	e.reopen(t)
	rec, ok := e.record(t, res.ID)
	if !ok || rec.Pending == nil || !rec.Pending.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("reservation after reopen: %+v %v", rec, ok)
	}
	e.clock.Advance(59 * time.Second)
	if p := e.auto(t); p.Prefix == res.Prefix {
		t.Fatal("a reservation was handed out again before its deadline after a reopen")
	}
	e.reopen(t)
	e.clock.Advance(time.Second)
	if p := e.auto(t); p.Prefix != res.Prefix {
		t.Fatalf("the reservation is not free after its deadline: got %s", p.Prefix)
	}

	for _, a := range []netip.Prefix{a1, a2, a3} {
		_, err := e.m.RequestAddress(ctx, used.ID, a.Addr().String(), nil)
		wantErr(t, err, pluginapi.ErrConflict, a.Addr().String())
	}
	if a := e.address(t, used.ID, "", nil); a.String() != "10.0.0.3/24" {
		t.Fatalf("after reopen %v (had %v %v %v)", a, a1, a2, a3)
	}
}

func TestRequestAddress(t *testing.T) {
	e := newEnv(t, newHost().addr(2, "10.0.0.3/24"), nil)
	p := e.pool(t, "", "10.0.0.0/24", "", nil, false)
	ranged := e.pool(t, "", "10.1.0.0/24", "10.1.0.128/25", nil, false)
	// A /31 pool is refused since issue 21; one an older version handed
	// out (in the state file) still hands out both its addresses.
	tiny := store.IPAMPool{ID: "0000000000000031", Space: LocalSpace, Prefix: "10.2.0.0/31", Created: t0}
	if err := e.db.Batch(func(tx *store.Tx) error { return tx.PutIPAMPool(tiny) }); err != nil {
		t.Fatal(err)
	}
	v6 := e.pool(t, "", "2001:db8::/64", "", nil, true)
	for _, step := range []struct {
		name    string
		pool    string
		address string
		opts    map[string]string
		release bool
		want    string
		err     error
		words   []string
	}{
		{name: "gateway: the first usable", pool: p.ID, opts: gwOpts, want: "10.0.0.1/24"},
		{name: "gateway again: in use", pool: p.ID, opts: gwOpts, err: pluginapi.ErrConflict, words: []string{"10.0.0.1"}},
		{name: "lowest free, host's skipped", pool: p.ID, want: "10.0.0.2/24"},
		{name: "next skips the host's", pool: p.ID, want: "10.0.0.4/24"},
		{name: "given and free", pool: p.ID, address: "10.0.0.50", want: "10.0.0.50/24"},
		{name: "given with a length", pool: p.ID, address: "10.0.0.51/24", want: "10.0.0.51/24"},
		{name: "given and taken", pool: p.ID, address: "10.0.0.50", err: pluginapi.ErrConflict, words: []string{"10.0.0.50", "in use"}},
		{name: "given, the host's", pool: p.ID, address: "10.0.0.3", err: pluginapi.ErrConflict, words: []string{"10.0.0.3"}},
		{name: "given outside", pool: p.ID, address: "10.0.1.5", err: pluginapi.ErrInvalid, words: []string{"10.0.1.5", "10.0.0.0/24"}},
		{name: "given the network address", pool: p.ID, address: "10.0.0.0", err: pluginapi.ErrInvalid, words: []string{"10.0.0.0"}},
		{name: "given the broadcast", pool: p.ID, address: "10.0.0.255", err: pluginapi.ErrInvalid, words: []string{"10.0.0.255"}},
		{name: "given not an address", pool: p.ID, address: "ten", err: pluginapi.ErrInvalid, words: []string{`"ten"`}},
		{name: "given IPv6 in an IPv4 pool", pool: p.ID, address: "2001:db8::5", err: pluginapi.ErrInvalid, words: []string{"2001:db8::5"}},
		{name: "release", pool: p.ID, address: "10.0.0.2", release: true},
		{name: "released is free again", pool: p.ID, want: "10.0.0.2/24"},
		{name: "release with a length", pool: p.ID, address: "10.0.0.50/24", release: true},
		{name: "given after release", pool: p.ID, address: "10.0.0.50", want: "10.0.0.50/24"},
		{name: "release unknown address", pool: p.ID, address: "10.0.0.99", release: true},
		{name: "release unknown pool", pool: "nope", address: "10.0.0.99", release: true},
		{name: "unknown pool", pool: "nope", err: pluginapi.ErrNotFound, words: []string{"nope"}},
		{name: "no pool", pool: "", err: pluginapi.ErrInvalid},
		{name: "range: the first of the range", pool: ranged.ID, want: "10.1.0.128/24"},
		{name: "range: gateway is the pool's first", pool: ranged.ID, opts: gwOpts, want: "10.1.0.1/24"},
		{name: "range: given outside the range, inside the pool", pool: ranged.ID, address: "10.1.0.9", want: "10.1.0.9/24"},
		{name: "/31: first", pool: tiny.ID, want: "10.2.0.0/31"},
		{name: "/31: second", pool: tiny.ID, want: "10.2.0.1/31"},
		{name: "/31: none left", pool: tiny.ID, err: pluginapi.ErrConflict, words: []string{tiny.ID}},
		{name: "IPv6 gateway", pool: v6.ID, opts: gwOpts, want: "2001:db8::1/64"},
		{name: "IPv6 next", pool: v6.ID, want: "2001:db8::2/64"},
		{name: "IPv6 given", pool: v6.ID, address: "2001:db8::ff", want: "2001:db8::ff/64"},
		{name: "IPv6 given the anycast address", pool: v6.ID, address: "2001:db8::", err: pluginapi.ErrInvalid, words: []string{"2001:db8::"}},
		{name: "IPv6 given with a zone", pool: v6.ID, address: "2001:db8::7%eth0", err: pluginapi.ErrInvalid, words: []string{"2001:db8::7%eth0"}},
	} {
		if step.release {
			if err := e.m.ReleaseAddress(ctx, step.pool, step.address); err != nil {
				t.Fatalf("%s: ReleaseAddress: %v", step.name, err)
			}
			continue
		}
		got, err := e.m.RequestAddress(ctx, step.pool, step.address, step.opts)
		if step.err != nil {
			if err == nil {
				t.Fatalf("%s: got %v, want an error", step.name, got)
			}
			if !errors.Is(err, step.err) {
				t.Fatalf("%s: error %q does not wrap %v", step.name, err, step.err)
			}
			for _, w := range step.words {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%s: error %q does not mention %q", step.name, err, w)
				}
			}
			continue
		}
		if err != nil || got.String() != step.want {
			t.Fatalf("%s: RequestAddress = %v, %v; want %s", step.name, got, err, step.want)
		}
	}
}

func TestGatewayTakenByHost(t *testing.T) {
	e := newEnv(t, newHost().addr(2, "10.0.0.1/24"), nil)
	p := e.pool(t, "", "10.0.0.0/24", "", nil, false)
	_, err := e.m.RequestAddress(ctx, p.ID, "", gwOpts)
	wantErr(t, err, pluginapi.ErrConflict, "10.0.0.1", "--gateway")
	if a := e.address(t, p.ID, "10.0.0.254", gwOpts); a.String() != "10.0.0.254/24" {
		t.Fatalf("named gateway %v", a)
	}
}

func TestReleasePool(t *testing.T) {
	e := newEnv(t, nil, nil)
	p := e.pool(t, "", "10.0.0.0/24", "", nil, false)
	e.address(t, p.ID, "", nil)
	if err := e.m.ReleasePool(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.record(t, p.ID); ok {
		t.Fatal("released pool kept")
	}
	if err := e.m.ReleasePool(ctx, p.ID); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := e.m.ReleasePool(ctx, "never-was"); err != nil {
		t.Fatalf("release of an unknown pool: %v", err)
	}
	wantErr(t, e.m.ReleasePool(ctx, ""), pluginapi.ErrInvalid)
	_, err := e.m.RequestAddress(ctx, p.ID, "", nil)
	wantErr(t, err, pluginapi.ErrNotFound, p.ID)
	// The same pool again starts empty.
	q := e.pool(t, "", "10.0.0.0/24", "", nil, false)
	if a := e.address(t, q.ID, "", nil); a.String() != "10.0.0.1/24" {
		t.Fatalf("first address of a re-requested pool %v", a)
	}
	wantErr(t, e.m.ReleaseAddress(ctx, "", "10.0.0.1"), pluginapi.ErrInvalid)
	wantErr(t, e.m.ReleaseAddress(ctx, q.ID, "x"), pluginapi.ErrInvalid, `"x"`)
}

func TestPoolOptionErrors(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.Bases = []Base{base("172.16.0.0/12", 24), base("fd00:1::/48", 64)} })
	for _, tc := range []struct {
		name          string
		space, pool   string
		sub           string
		opts          map[string]string
		v6            bool
		words         []string // nil: accepted
		wantPool      string
		wantRangeOfIt string
	}{
		{name: "unknown key", opts: map[string]string{"sise": "24"}, words: []string{`"sise"`, "parent", "size"}},
		{name: "unknown keys: the first named", opts: map[string]string{"zz": "1", "aa": "2", OptSize: "24"}, words: []string{`"aa"`}},
		{name: "Docker's keys pass", opts: map[string]string{"com.docker.network.ipam.serial": "true"}, wantPool: "172.16.0.0/24"},
		{name: "size not a number", opts: map[string]string{OptSize: "big"}, words: []string{"size=big", "1 to 30"}},
		{name: "size empty", opts: map[string]string{OptSize: ""}, words: []string{"size=", "1 to 30"}},
		{name: "size 0", opts: map[string]string{OptSize: "0"}, words: []string{"size=0", "1 to 30"}},
		{name: "size 31", opts: map[string]string{OptSize: "31"}, words: []string{"size=31", "1 to 30"}},
		{name: "IPv6 size 127", opts: map[string]string{OptSize6: "127"}, v6: true, words: []string{"size6=127", "1 to 126"}},
		{name: "size larger than every base", opts: map[string]string{OptSize: "8"}, words: []string{"size=8", "base=172.16.0.0/12,size=24", "--default-address-pool"}},
		{name: "size with a pool", pool: "10.0.0.0/24", opts: map[string]string{OptSize: "24"}, words: []string{"size=24", "--subnet"}},
		{name: "size with a parent", opts: map[string]string{OptSize: "24", OptParent: "eth0"}, words: []string{"size=24", "parent=eth0"}},
		{name: "size /26", opts: map[string]string{OptSize: "/26"}, wantPool: "172.16.1.0/26"},
		{name: "parent empty", opts: map[string]string{OptParent: ""}, words: []string{"parent="}},
		{name: "bad address space", space: "default", words: []string{`"default"`, LocalSpace, GlobalSpace}},
		{name: "global space", space: GlobalSpace, pool: "10.9.0.0/24", wantPool: "10.9.0.0/24"},
		{name: "pool not a CIDR", pool: "10.0.0.0", words: []string{`"10.0.0.0"`, "CIDR"}},
		{name: "pool length out of range", pool: "10.0.0.0/33", words: []string{`"10.0.0.0/33"`}},
		{name: "pool garbage", pool: "nope", words: []string{`"nope"`}},
		{name: "IPv6 pool for IPv4", pool: "2001:db8::/64", words: []string{`"2001:db8::/64"`, "IPv4"}},
		{name: "IPv4 pool for IPv6", pool: "10.0.0.0/24", v6: true, words: []string{`"10.0.0.0/24"`, "IPv6"}},
		{name: "IPv4-mapped pool for IPv6", pool: "::ffff:10.0.0.0/120", v6: true, words: []string{"::ffff:10.0.0.0/120"}},
		{name: "range not a CIDR", pool: "10.0.0.0/24", sub: "10.0.0.0", words: []string{`"10.0.0.0"`, "--ip-range"}},
		{name: "range of the other family", pool: "10.0.0.0/24", sub: "2001:db8::/120", words: []string{"--ip-range", "2001:db8::/120"}},
		{name: "range outside the pool", pool: "10.0.0.0/24", sub: "10.0.1.0/25", words: []string{"10.0.1.0/25", "10.0.0.0/24"}},
		{name: "range wider than the pool", pool: "10.0.0.0/24", sub: "10.0.0.0/16", words: []string{"10.0.0.0/16", "10.0.0.0/24"}},
		{name: "range without a pool", sub: "172.16.0.0/25", words: []string{"--ip-range", "172.16.0.0/25", "--subnet"}},
		{name: "range inside", pool: "10.0.0.0/24", sub: "10.0.0.130/25", wantPool: "10.0.0.0/24", wantRangeOfIt: "10.0.0.128/25"},
		{name: "IPv6 parent without a pool", opts: map[string]string{OptParent: "eth0"}, v6: true, words: []string{"parent=eth0", "IPv6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.m.RequestPool(ctx, tc.space, tc.pool, tc.sub, tc.opts, tc.v6)
			if tc.words == nil {
				if err != nil || got.Prefix != tc.wantPool || got.Range != tc.wantRangeOfIt {
					t.Fatalf("RequestPool = %+v, %v; want %s range %q", got, err, tc.wantPool, tc.wantRangeOfIt)
				}
				return
			}
			wantErr(t, err, pluginapi.ErrInvalid, tc.words...)
		})
	}
}

// call posts body to /IpamDriver.name on the IPAM's routes.
func call(t *testing.T, m *IPAM, name, body string, status int, out any) {
	t.Helper()
	mux := http.NewServeMux()
	m.Register(mux)
	rr := httptest.NewRecorder()
	mux.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/IpamDriver."+name, bytes.NewBufferString(body)))
	if rr.Code != status {
		t.Fatalf("%s: status %d, want %d: %s", name, rr.Code, status, rr.Body)
	}
	if out != nil {
		if err := json.Unmarshal(rr.Body.Bytes(), out); err != nil {
			t.Fatalf("%s: answer %s: %v", name, rr.Body, err)
		}
	}
}

func TestHTTPRoutes(t *testing.T) {
	e := newEnv(t, nil, nil)
	var caps map[string]bool
	call(t, e.m, "GetCapabilities", ``, http.StatusOK, &caps)
	if caps["RequiresMACAddress"] || caps["RequiresRequestReplay"] {
		t.Fatalf("capabilities %v", caps)
	}
	var spaces map[string]string
	call(t, e.m, "GetDefaultAddressSpaces", `{}`, http.StatusOK, &spaces)
	if spaces["LocalDefaultAddressSpace"] != LocalSpace || spaces["GlobalDefaultAddressSpace"] != GlobalSpace {
		t.Fatalf("spaces %v", spaces)
	}
	var pool struct {
		PoolID string
		Pool   string
		Data   map[string]string
	}
	call(t, e.m, "RequestPool", `{"AddressSpace":"underlay-local"}`, http.StatusOK, &pool)
	if pool.Pool != "172.16.0.0/24" || pool.Data == nil || len(pool.Data) != 0 {
		t.Fatalf("RequestPool answer %+v", pool)
	}
	var addr struct {
		Address string
		Data    map[string]string
	}
	call(t, e.m, "RequestAddress", `{"PoolID":"`+pool.PoolID+`","Options":{"RequestAddressType":"com.docker.network.gateway"}}`, http.StatusOK, &addr)
	if addr.Address != "172.16.0.1/24" {
		t.Fatalf("RequestAddress answer %+v", addr)
	}
	var empty map[string]any
	call(t, e.m, "ReleaseAddress", `{"PoolID":"unknown","Address":"10.0.0.1"}`, http.StatusOK, &empty)
	call(t, e.m, "ReleasePool", `{"PoolID":"unknown"}`, http.StatusOK, &empty)
	if len(empty) != 0 {
		t.Fatalf("release answered %v", empty)
	}
	var refusal pluginapi.ErrorResponse
	call(t, e.m, "RequestPool", `{"AddressSpace":"underlay-local","Options":{"bogus":"1"}}`, http.StatusBadRequest, &refusal)
	if !strings.Contains(refusal.Err, "bogus") {
		t.Fatalf("refusal %+v", refusal)
	}
	call(t, e.m, "RequestPool", `{"AddressSpace":"underlay-local","Pool":"172.16.0.0/16"}`, http.StatusConflict, &refusal)
}

// Swarm asks for a global pool on the manager's allocator and again on the
// node that runs a task: the same subnet twice in the global space is fine.
func TestGlobalSpaceTakesTheSameSubnetAgain(t *testing.T) {
	e := newEnv(t, newHost(), nil)
	a := e.pool(t, GlobalSpace, "198.18.9.0/24", "", nil, false)
	b := e.pool(t, GlobalSpace, "198.18.9.0/24", "", nil, false)
	if a.ID == b.ID || a.Prefix != b.Prefix {
		t.Fatalf("global pools %+v and %+v", a, b)
	}
	if _, err := e.m.RequestPool(context.Background(), LocalSpace, "198.18.9.0/24", "", nil, false); err != nil {
		t.Fatalf("the local space is apart from the global one: %v", err)
	}
	if _, err := e.m.RequestPool(context.Background(), LocalSpace, "198.18.9.128/25", "", nil, false); err == nil {
		t.Fatal("an overlapping local pool was granted")
	}
}

// A subnet given with parent= learns the LAN's gateway: the way to use a
// parent's LAN on engines that check automatic pools against host routes.
func TestExplicitPoolOfTheParentLANLearnsItsGateway(t *testing.T) {
	host := newHost().addr(2, "192.168.1.10/24").route(2, 0, "192.168.1.0/24", "").route(2, 0, "0.0.0.0/0", "192.168.1.1")
	e := newEnv(t, host, nil)
	p := e.pool(t, "", "192.168.1.0/24", "", map[string]string{OptParent: "eth0"}, false)
	if p.Gateway != "192.168.1.1" {
		t.Fatalf("pool %+v: want the LAN gateway 192.168.1.1", p)
	}
	if a := e.address(t, p.ID, "", nil); a.String() != "192.168.1.2/24" {
		t.Fatalf("first address %s: want 192.168.1.2 (.1 is the LAN gateway, .10 the host's)", a)
	}
	// A second LAN pool asked without a subnet is refused with the way out.
	_, err := e.m.RequestPool(context.Background(), "", "", "", map[string]string{OptParent: "eth0"}, false)
	if err == nil || !strings.Contains(err.Error(), "--subnet 192.168.1.0/24 with --ipam-opt parent=eth0") {
		t.Fatalf("a second LAN pool: %v", err)
	}
}

// A pool with a parent does not offer an address an endpoint of the
// daemon's networks on that parent holds (a DHCP endpoint's lease, say),
// and refuses it asked for; a pool on another parent offers it.
func TestAddressHeldByAnEndpointOnTheParent(t *testing.T) {
	e := newEnv(t, nil, nil)
	if err := e.db.Update(func(tx *store.Tx) error {
		if err := tx.PutNetwork(record.Network{ID: "dhcpnet", Type: "macvlan", Parent: "eth0"}); err != nil {
			return err
		}
		return tx.PutEndpoint(record.Endpoint{NetworkID: "dhcpnet", ID: "leased", Link: "l1", IPv4: "198.18.2.2/24", Lease: &record.Lease{Addr: "198.18.2.2/24"}})
	}); err != nil {
		t.Fatal(err)
	}
	p := e.pool(t, "", "198.18.2.0/24", "", map[string]string{"parent": "eth0"}, false)
	if a := e.address(t, p.ID, "", nil); a.Addr() == netip.MustParseAddr("198.18.2.2") {
		t.Fatalf("the pool on eth0 offered %s, which an endpoint on eth0 holds", a)
	}
	if _, err := e.m.RequestAddress(ctx, p.ID, "198.18.2.2", nil); !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), "198.18.2.2") || !strings.Contains(err.Error(), "endpoint leased of network dhcpnet on parent eth0 holds it") {
		t.Fatalf("asked for 198.18.2.2 held on eth0: %v, want a conflict naming it", err)
	}
	other := e.pool(t, "", "198.18.2.0/24", "", map[string]string{"parent": "eth1"}, false)
	if _, err := e.m.RequestAddress(ctx, other.ID, "198.18.2.2", nil); err != nil {
		t.Fatalf("198.18.2.2 of a pool on another parent: %v", err)
	}
}
