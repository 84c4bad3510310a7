package ipam

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Issue 21, section 4: the IPAM defects found by adversarial use.

func TestBlockingRoutes(t *testing.T) {
	type rt struct {
		dst   string
		table int
	}
	for _, tc := range []struct {
		name   string
		routes []rt
		want   []string // the destinations that block, in any order
	}{
		{name: "ordinary routes block", routes: []rt{{"10.0.0.0/24", 254}, {"192.168.1.0/24", 100}}, want: []string{"10.0.0.0/24", "192.168.1.0/24"}},
		{name: "default routes do not", routes: []rt{{"0.0.0.0/0", 254}, {"::/0", 254}, {"0.0.0.0/0", 100}}},
		{name: "OpenVPN def1: the two halves are a default route, the routes inside them still block",
			routes: []rt{{"0.0.0.0/0", 254}, {"0.0.0.0/1", 254}, {"128.0.0.0/1", 254}, {"10.8.0.0/24", 254}, {"203.0.113.5/32", 254}, {"192.168.1.0/24", 254}},
			want:   []string{"10.8.0.0/24", "203.0.113.5/32", "192.168.1.0/24"}},
		{name: "one half alone blocks", routes: []rt{{"0.0.0.0/1", 254}, {"10.8.0.0/24", 254}}, want: []string{"0.0.0.0/1", "10.8.0.0/24"}},
		{name: "halves in two tables block: each table routes half", routes: []rt{{"0.0.0.0/1", 254}, {"128.0.0.0/1", 100}}, want: []string{"0.0.0.0/1", "128.0.0.0/1"}},
		{name: "four quarters", routes: []rt{{"192.0.0.0/2", 254}, {"0.0.0.0/2", 254}, {"128.0.0.0/2", 254}, {"64.0.0.0/2", 254}}},
		{name: "a half and two quarters", routes: []rt{{"0.0.0.0/1", 254}, {"128.0.0.0/2", 254}, {"192.0.0.0/2", 254}, {"172.16.0.0/12", 254}}, want: []string{"172.16.0.0/12"}},
		{name: "a half and a quarter leave a gap", routes: []rt{{"0.0.0.0/1", 254}, {"128.0.0.0/2", 254}}, want: []string{"0.0.0.0/1", "128.0.0.0/2"}},
		{name: "a duplicate half", routes: []rt{{"0.0.0.0/1", 254}, {"0.0.0.0/1", 254}, {"128.0.0.0/1", 254}}},
		{name: "IPv6 halves", routes: []rt{{"::/1", 254}, {"8000::/1", 254}, {"2001:db8::/64", 254}, {"10.0.0.0/8", 254}}, want: []string{"2001:db8::/64", "10.0.0.0/8"}},
		{name: "IPv4 halves do not cover IPv6", routes: []rt{{"0.0.0.0/1", 254}, {"128.0.0.0/1", 254}, {"::/1", 254}}, want: []string{"::/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var routes []kernel.Route
			for _, r := range tc.routes {
				routes = append(routes, kernel.Route{Dst: pfx(r.dst), Table: r.table, LinkIndex: 2})
			}
			var got []string
			for _, p := range blockingRoutes(routes) {
				got = append(got, p.String())
			}
			slices.Sort(got)
			want := append([]string(nil), tc.want...)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("blockingRoutes(%v) = %v, want %v", tc.routes, got, want)
			}
		})
	}
}

func TestPoolRule(t *testing.T) {
	for _, tc := range []struct {
		pool  string
		words []string // nil: a pool
	}{
		{pool: "198.18.0.0/24"},
		{pool: "10.0.0.0/30"},
		{pool: "10.0.0.0/8"},
		{pool: "126.0.0.0/8"},
		{pool: "128.0.0.0/2"},
		{pool: "169.254.0.0/16"},
		{pool: "2001:db8::/64"},
		{pool: "2001:db8::/126"},
		{pool: "fd00::/8"},
		{pool: "0.0.0.0/0", words: []string{"every IPv4 address", "default route", "198.18.1.0/24"}},
		{pool: "::/0", words: []string{"every IPv6 address", "2001:db8:1::/64"}},
		{pool: "0.0.0.0/1", words: []string{"127.0.0.0/8", "loopback"}},
		{pool: "127.0.0.0/8", words: []string{"127.0.0.0/8", "loopback", "198.18.1.0/24"}},
		{pool: "127.0.0.0/24", words: []string{"127.0.0.0/8", "loopback"}},
		{pool: "224.0.0.0/4", words: []string{"224.0.0.0/4", "multicast"}},
		{pool: "239.1.0.0/16", words: []string{"224.0.0.0/4", "multicast"}},
		{pool: "10.0.0.0/31", words: []string{"/31", "/30 or shorter"}},
		{pool: "10.0.0.7/32", words: []string{"/32", "/30 or shorter"}},
		{pool: "2001:db8::/127", words: []string{"/127", "/126 or shorter"}},
		{pool: "2001:db8::1/128", words: []string{"/128", "/126 or shorter"}},
		{pool: "::/96", words: []string{"::1/128", "loopback"}},
		{pool: "fe80::/10", words: []string{"fe80::/10", "link-local"}},
		{pool: "fe80::/64", words: []string{"fe80::/10", "link-local"}},
		{pool: "ff00::/8", words: []string{"ff00::/8", "multicast"}},
		{pool: "ff02::/16", words: []string{"ff00::/8", "multicast"}},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			_, err := parsePoolRequest("", tc.pool, "", nil, strings.Contains(tc.pool, ":"), DefaultBases())
			if tc.words == nil {
				if err != nil {
					t.Fatalf("pool %s refused: %v", tc.pool, err)
				}
				return
			}
			wantErr(t, err, pluginapi.ErrInvalid, append([]string{"pool " + pfx(tc.pool).Masked().String()}, tc.words...)...)
		})
	}
}

// The overlap rule goes by the kernel link the parent names: a NIC and its
// altname are one wire.
func TestParentIsTheKernelLink(t *testing.T) {
	e := newEnv(t, newHost().altname(2, "lan0").altname(3, "wan0"), nil)
	held := e.pool(t, "", "198.18.10.0/24", "", map[string]string{OptParent: "eth0"}, false)
	for _, parent := range []string{"eth0", "lan0"} {
		_, err := e.m.RequestPool(ctx, "", "198.18.10.0/25", "", map[string]string{OptParent: parent}, false)
		wantErr(t, err, pluginapi.ErrConflict, held.ID, "198.18.10.0/24")
	}
	// Asked by its altname, the pool records the kernel name; the other
	// link (asked by its altname too) is another wire.
	other := e.pool(t, "", "198.18.10.0/24", "", map[string]string{OptParent: "wan0"}, false)
	if other.Parent != "eth1" {
		t.Fatalf("pool of parent wan0 (altname of eth1) records parent %q, want eth1", other.Parent)
	}
	_, err := e.m.RequestPool(ctx, "", "198.18.10.0/24", "", map[string]string{OptParent: "eth1"}, false)
	wantErr(t, err, pluginapi.ErrConflict, other.ID)

	// A pool recorded under a name that is now the link's altname (the
	// link was renamed and kept its old name as altname) is the same
	// link's.
	e.host.rename(2, "en0").altname(2, "eth0")
	_, err = e.m.RequestPool(ctx, "", "198.18.10.0/26", "", map[string]string{OptParent: "en0"}, false)
	wantErr(t, err, pluginapi.ErrConflict, held.ID)
}

func TestParentMustExist(t *testing.T) {
	host := func() *fakeHost {
		return newHost().addr(1, "127.0.0.1/8").addr(2, "192.168.1.10/24").addr(3, "10.9.0.0/31")
	}
	for _, tc := range []struct {
		name         string
		space, pool  string
		parent       string
		words        []string // nil: accepted
		recordParent string
	}{
		{name: "no such link, with a subnet", pool: "198.18.1.0/24", parent: "nosuch0", words: []string{"parent=nosuch0", "no such interface", "drop --ipam-opt parent"}},
		{name: "no such link, without a subnet", parent: "nosuch0", words: []string{"parent=nosuch0", "no such interface"}},
		{name: "no such link in the global space (swarm's manager need not have it)", space: GlobalSpace, pool: "198.18.1.0/24", parent: "nosuch0", recordParent: "nosuch0"},
		{name: "loopback, with a subnet", pool: "198.18.1.0/24", parent: "lo", words: []string{"parent=lo", "loopback", "eth0"}},
		{name: "loopback learns nothing", parent: "lo", words: []string{"parent=lo", "loopback"}},
		{name: "a /31 LAN is no pool", parent: "eth1", words: []string{"parent=eth1", "10.9.0.0/31", "/30 or shorter", "--subnet"}},
		{name: "an existing link", pool: "198.18.1.0/24", parent: "eth0", recordParent: "eth0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, host(), nil)
			got, err := e.m.RequestPool(ctx, tc.space, tc.pool, "", map[string]string{OptParent: tc.parent}, false)
			if tc.words != nil {
				wantErr(t, err, pluginapi.ErrInvalid, tc.words...)
				if ps, _ := e.m.Pools(ctx); len(ps) != 0 {
					t.Fatalf("refused, yet pools %+v are held", ps)
				}
				return
			}
			if err != nil || got.Parent != tc.recordParent {
				t.Fatalf("RequestPool = %+v, %v; want parent %q recorded", got, err, tc.recordParent)
			}
		})
	}
}

// putNetwork writes a network record of underlay's driver whose pools came
// from another IPAM (Docker's default: underlay's IPAM holds nothing).
func putNetwork(t *testing.T, e *env, id string, subnets ...string) {
	t.Helper()
	n := record.Network{ID: id, Type: "macvlan", Parent: "eth0", Mode: "bridge"}
	for _, s := range subnets {
		if strings.Contains(s, ":") {
			n.IPv6 = append(n.IPv6, record.Pool{Subnet: s})
		} else {
			n.IPv4 = append(n.IPv4, record.Pool{Subnet: s})
		}
	}
	if err := e.db.Batch(func(tx *store.Tx) error { return tx.PutNetwork(n) }); err != nil {
		t.Fatal(err)
	}
}

func TestAutoPoolAvoidsNetworksOfOtherIPAMs(t *testing.T) {
	e := newEnv(t, nil, func(c *Config) { c.Bases = []Base{base("10.0.0.0/16", 24), base("fd00:1::/48", 64)} })
	putNetwork(t, e, strings.Repeat("a", 64), "10.0.0.0/24", "fd00:1::/64")
	putNetwork(t, e, strings.Repeat("b", 64), "10.0.1.0/25")
	// Asked again and again (Docker retries a refused create), each auto
	// pool is free of both networks and of the pools before it.
	for _, want := range []string{"10.0.2.0/24", "10.0.3.0/24"} {
		if p := e.auto(t); p.Prefix != want {
			t.Fatalf("auto pool %s, want %s: free of the networks' 10.0.0.0/24 and 10.0.1.0/25", p.Prefix, want)
		}
	}
	if p := e.pool(t, "", "", "", nil, true); p.Prefix != "fd00:1:0:1::/64" {
		t.Fatalf("IPv6 auto pool %s, want fd00:1:0:1::/64: free of the network's fd00:1::/64", p.Prefix)
	}
}

func TestAutoPoolWithSplitDefaultRoutes(t *testing.T) {
	// OpenVPN's redirect-gateway def1, beside the LAN's default route.
	host := newHost().addr(2, "192.168.1.10/24").route(2, 0, "192.168.1.0/24", "").route(2, 0, "0.0.0.0/0", "192.168.1.1").
		route(3, 0, "0.0.0.0/1", "10.8.0.1").route(3, 0, "128.0.0.0/1", "10.8.0.1").route(3, 0, "10.8.0.0/24", "").
		route(2, 0, "203.0.113.5/32", "192.168.1.1").route(3, 0, "172.16.0.0/24", "10.8.0.1")
	e := newEnv(t, host, nil) // the default base, 172.16.0.0/12
	if p := e.auto(t); p.Prefix != "172.16.1.0/24" {
		t.Fatalf("auto pool beside 0.0.0.0/1 and 128.0.0.0/1 = %s, want 172.16.1.0/24 (the halves are a default route; the VPN's 172.16.0.0/24 still blocks)", p.Prefix)
	}
	// A route that really covers a base is named in the refusal.
	e.host.route(3, 0, "172.16.0.0/12", "10.8.0.1")
	_, err := e.m.RequestPool(ctx, "", "", "", nil, false)
	wantErr(t, err, pluginapi.ErrConflict, "172.16.0.0/12", "table 254", "covers the whole base", "--default-address-pool", "--subnet")
}

// fakeKnown is Docker's subnets as a background list would have them.
type fakeKnown struct {
	mu      sync.Mutex
	subnets []netip.Prefix
	asOf    time.Time
	wanted  int
}

func (k *fakeKnown) KnownSubnets() ([]netip.Prefix, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]netip.Prefix(nil), k.subnets...), k.asOf
}

func (k *fakeKnown) set(asOf time.Time, subnets ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.subnets, k.asOf = pfxs(subnets...), asOf
}

func (k *fakeKnown) Wanted() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wanted++
}

func (k *fakeKnown) wants() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.wanted
}

func TestAutoPoolAvoidsKnownSubnets(t *testing.T) {
	known := &fakeKnown{subnets: pfxs("10.0.0.0/23", "10.0.3.0/24", "fd00:1::/64")}
	e := newEnv(t, nil, func(c *Config) {
		c.Bases = []Base{base("10.0.0.0/16", 24)}
		c.Known = known
	})
	if n := known.wants(); n != 0 {
		t.Fatalf("an IPAM with an empty state asked for Docker's subnets %d times at start: it is not in use yet", n)
	}
	for _, want := range []string{"10.0.2.0/24", "10.0.4.0/24"} {
		if p := e.auto(t); p.Prefix != want {
			t.Fatalf("auto pool %s, want %s: free of Docker's 10.0.0.0/23 and 10.0.3.0/24", p.Prefix, want)
		}
	}
	if known.wants() == 0 {
		t.Fatal("RequestPool did not say the IPAM is in use")
	}
	// Explicit pools are as before: Docker's subnets are not the IPAM's.
	if p := e.pool(t, "", "10.0.0.0/24", "", nil, false); p.Prefix != "10.0.0.0/24" {
		t.Fatalf("explicit pool %s", p.Prefix)
	}
	// A state file that holds pools is an IPAM in use from the start.
	e.cfg.Known = &fakeKnown{}
	e.reopen(t)
	if n := e.cfg.Known.(*fakeKnown).wants(); n != 1 {
		t.Fatalf("an IPAM whose state holds pools asked for Docker's subnets %d times at start, want once", n)
	}
}

// libnetwork releases a pool before it drops the network from its store:
// a listing of Docker's subnets asked for before the release, or just
// after it, still shows the network. The pool is free all the same.
func TestAutoPoolReleasedSinceDockerListed(t *testing.T) {
	known := &fakeKnown{}
	e := newEnv(t, nil, func(c *Config) {
		c.Bases = []Base{base("10.0.0.0/16", 24)}
		c.Known = known
	})
	p := e.auto(t)
	if p.Prefix != "10.0.0.0/24" {
		t.Fatalf("first auto pool %s", p.Prefix)
	}
	e.address(t, p.ID, "", gwOpts)
	for _, tc := range []struct {
		name  string
		asOf  time.Duration // after the release
		reuse bool
	}{
		{"listed before the release", -time.Second, true},
		{"listed just after the release", releaseGrace - time.Millisecond, true},
		{"listed well after the release: another network uses it", releaseGrace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			released := e.clock.Now()
			if err := e.m.ReleasePool(ctx, p.ID); err != nil {
				t.Fatal(err)
			}
			known.set(released.Add(tc.asOf), "10.0.0.0/24")
			q := e.auto(t)
			if got := q.Prefix == "10.0.0.0/24"; got != tc.reuse {
				t.Fatalf("auto pool %s after 10.0.0.0/24 was released at %s and Docker listed it at %s: want it reused %v",
					q.Prefix, released.Format(time.StampMilli), released.Add(tc.asOf).Format(time.StampMilli), tc.reuse)
			}
			if err := e.m.ReleasePool(ctx, q.ID); err != nil {
				t.Fatal(err)
			}
			p = e.pool(t, "", "10.0.0.0/24", "", nil, false) // held again, for the next case
			e.clock.Advance(time.Hour)
		})
	}
}
