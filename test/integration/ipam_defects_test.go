package integration

// The IPAM defects of issue 21 (section 4), through the real binary: the
// parent is the kernel link (altnames included) and must exist, automatic
// pools avoid underlay's networks of other IPAMs, split default routes and
// Docker's subnets, and pools that can never be a network's are refused.

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/underlay-net/underlay/internal/itest"
)

// A NIC and its altname are one wire: the second pool of the same subnet
// on it is refused whichever name each asks with, and another NIC may
// reuse the subnet.
func TestIPAMParentAltnameIsTheSameLink(t *testing.T) {
	t.Parallel()
	ns, d := ipamSetup(t)
	if err := ns.NL.LinkAddAltName(ns.MustLink("vp0"), "lan0"); err != nil {
		t.Fatalf("add altname lan0 to vp0: %v", err)
	}
	if l := ns.Link("lan0"); l == nil || l.Attrs().Name != "vp0" {
		t.Fatalf("altname lan0 does not resolve to vp0 in the kernel (%v)", l)
	}
	held := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.0/24", Options: map[string]string{"parent": "vp0"}})
	for _, tc := range []struct{ pool, parent string }{
		{"198.18.10.0/24", "lan0"}, {"198.18.10.128/25", "lan0"}, {"198.18.10.0/24", "vp0"},
	} {
		p, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: tc.pool, Options: map[string]string{"parent": tc.parent}})
		if code != 409 || !strings.Contains(msg, held.PoolID) || !strings.Contains(msg, "198.18.10.0/24") {
			t.Fatalf("DEFECT: RequestPool %s parent=%s (vp0 is lan0) over pool %s of parent vp0 answered %d %q %+v: want 409 naming the held pool and its ID",
				tc.pool, tc.parent, held.PoolID, code, msg, p)
		}
	}
	// Asked by the altname first, the same holds the other way round.
	other := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.11.0/24", Options: map[string]string{"parent": "lan0"}})
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: "198.18.11.0/25", Options: map[string]string{"parent": "vp0"}}); code != 409 || !strings.Contains(msg, other.PoolID) {
		t.Fatalf("DEFECT: RequestPool 198.18.11.0/25 parent=vp0 over pool %s of parent lan0 answered %d %q: want 409 naming it", other.PoolID, code, msg)
	}
	// vp1 is another wire.
	d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.0/24", Options: map[string]string{"parent": "vp1"}})
	s := d.StopAndReadIPAM()
	if got := s.Pools[other.PoolID].Parent; got != "vp0" {
		t.Fatalf("the pool asked with parent=lan0 records parent %q, want the kernel name vp0", got)
	}
}

// A parent no link has is refused, with a subnet too (it was accepted),
// naming it and the fix; so is the loopback interface.
func TestIPAMParentMustExist(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	for _, tc := range []struct {
		req   ipam.RequestPoolRequest
		words []string
	}{
		{ipam.RequestPoolRequest{Pool: "198.18.1.0/24", Options: map[string]string{"parent": "nosuch0"}}, []string{"parent=nosuch0", "no such interface", "drop --ipam-opt parent"}},
		{ipam.RequestPoolRequest{Pool: "198.18.1.0/24", SubPool: "198.18.1.0/26", Options: map[string]string{"parent": "nosuch0"}}, []string{"parent=nosuch0", "no such interface"}},
		{ipam.RequestPoolRequest{Options: map[string]string{"parent": "nosuch0"}}, []string{"parent=nosuch0", "no such interface"}},
		{ipam.RequestPoolRequest{Options: map[string]string{"parent": "lo"}}, []string{"parent=lo", "loopback", "127.0.0.0/8"}},
		{ipam.RequestPoolRequest{Pool: "198.18.1.0/24", Options: map[string]string{"parent": "lo"}}, []string{"parent=lo", "loopback"}},
	} {
		p, code, msg := d.RequestPool(tc.req)
		if code != 400 {
			t.Fatalf("DEFECT: RequestPool %+v answered %d %q %+v: want 400", tc.req, code, msg, p)
		}
		for _, w := range tc.words {
			if !strings.Contains(msg, w) {
				t.Fatalf("RequestPool %+v refused with %q: want it to say %q", tc.req, msg, w)
			}
		}
	}
	if s := d.StopAndReadIPAM(); len(s.Pools) != 0 {
		t.Fatalf("after the refusals the state file holds pools %+v, want none", s.Pools)
	}
}

// Pools that can never be a network's are refused naming the rule, and
// none of them is held (0.0.0.0/0 held would block every other pool).
func TestIPAMExplicitPoolRangeRules(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	for _, tc := range []struct {
		pool string
		v6   bool
		word string
	}{
		{"0.0.0.0/0", false, "every IPv4 address"},
		{"127.0.0.0/8", false, "loopback"},
		{"224.0.0.0/4", false, "multicast"},
		{"198.18.0.0/31", false, "/30 or shorter"},
		{"198.18.0.1/32", false, "/30 or shorter"},
		{"::/0", true, "every IPv6 address"},
		{"::1/128", true, "/126 or shorter"},
		{"::/64", true, "loopback"},
		{"ff00::/8", true, "multicast"},
		{"fe80::/10", true, "link-local"},
		{"2001:db8::/127", true, "/126 or shorter"},
	} {
		want := netip.MustParsePrefix(tc.pool).Masked().String()
		if p, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: tc.pool, V6: tc.v6}); code != 400 || !strings.Contains(msg, want) || !strings.Contains(msg, tc.word) {
			t.Fatalf("DEFECT: RequestPool %s answered %d %q %+v: want 400 naming the pool and the rule (%q)", tc.pool, code, msg, p, tc.word)
		}
	}
	// Nothing was held: the first automatic pool is the base's first.
	wantPool(t, "auto pool after the refused pools", d.AutoPool(false), "198.18.0.0/24")
}

// A network of underlay's driver whose pool came from another IPAM
// (Docker's default): automatic pools avoid its subnet, so the network
// made from the automatic pool is not refused, and a retry gets another.
func TestIPAMAutoPoolAvoidsNetworksOfOtherIPAMs(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	// docker network create -d underlay --subnet 198.18.0.0/24 -o parent=vp0 (default IPAM)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.0.0/24,198.18.0.1/24"}})
	// docker network create -d underlay --ipam-driver underlay -o parent=vp0
	p := d.AutoPool(false)
	if netip.MustParsePrefix(p.Pool).Overlaps(netip.MustParsePrefix("198.18.0.0/24")) {
		t.Fatalf("DEFECT: auto pool %s overlaps network %s's 198.18.0.0/24 (another IPAM's pool): the driver refuses it and every retry gets it again", p.Pool, netA[:12])
	}
	gw := d.MustRequestAddress(p.PoolID, "", true)
	if msg := d.CreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{p.Pool + "," + gw}}); msg != "" {
		t.Fatalf("CreateNetwork of the auto pool %s answered %q, want {}", p.Pool, msg)
	}
	if q := d.AutoPool(false); q.Pool == p.Pool || netip.MustParsePrefix(q.Pool).Overlaps(netip.MustParsePrefix("198.18.0.0/24")) {
		t.Fatalf("the next auto pool is %s: want one free of 198.18.0.0/24 and of %s", q.Pool, p.Pool)
	}
}

// OpenVPN's redirect-gateway def1 routes everything through 0.0.0.0/1 and
// 128.0.0.0/1: a default route in two halves, which blocks nothing; the
// routes inside them still do.
func TestIPAMAutoPoolWithSplitDefaultRoutes(t *testing.T) {
	t.Parallel()
	ns, d := ipamSetup(t)
	ns.AddAddr("vp0", "10.8.0.2/24")
	ns.AddRoute("0.0.0.0/1", "10.8.0.1", "vp0", 0)
	ns.AddRoute("128.0.0.0/1", "10.8.0.1", "vp0", 0)
	ns.AddRoute("198.18.0.0/24", "10.8.0.1", "vp0", 0) // a VPN route inside the base
	p, code, msg := d.RequestPool(ipam.RequestPoolRequest{})
	if msg != "" {
		t.Fatalf("DEFECT: auto RequestPool with 0.0.0.0/1 and 128.0.0.0/1 routed answered %d %q: want a pool (the halves are a default route)", code, msg)
	}
	wantPool(t, "auto pool beside split default routes and a VPN route to 198.18.0.0/24", p, "198.18.1.0/24")
}

// Two underlay instances with their own state files on one host and one
// Docker: the second's automatic pool avoids the subnet Docker already
// uses for the first's network (listed in the background, never on the
// request path).
func TestIPAMAutoPoolAvoidsDockerSubnets(t *testing.T) {
	t.Parallel()
	docker := itest.NewFakeDocker(t)
	ns, a := ipamSetup(t, "--docker-host", docker.Host())
	b := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host(),
		"--default-address-pool", ipamBase, "--resolv-conf", resolvConf(t, "# no nameservers")}})

	// docker network create --ipam-driver A (the first instance) ...
	first := a.AutoPool(false)
	wantPool(t, "first instance's auto pool", first, "198.18.0.0/24")
	docker.SetSubnets(netA, first.Pool)
	docker.SetLive(netA)
	// ... and a macvlan network of Docker's own, on a subnet no one on
	// the host has an address or route in.
	const netM = "dddddddddddd0000000000000000000000000000000000000000000000000004"
	docker.SetSubnets(netM, "198.18.1.0/24")
	docker.Learn(netM)

	// The second instance is in use (libnetwork asks its capabilities
	// when it loads it) and lists Docker's networks in the background.
	b.MustIPAMCall("GetCapabilities", nil, nil)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(b.Log(), "Docker's subnets listed"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second instance did not list Docker's networks within 20 s")
		}
	}
	p := b.AutoPool(false)
	for _, used := range []string{first.Pool, "198.18.1.0/24"} {
		if netip.MustParsePrefix(p.Pool).Overlaps(netip.MustParsePrefix(used)) {
			t.Fatalf("DEFECT: the second instance's auto pool %s overlaps %s, which Docker already uses: two instances hand out the same addresses on one wire", p.Pool, used)
		}
	}
	wantPool(t, "second instance's auto pool", p, "198.18.2.0/24")

	// docker network rm on the first instance: libnetwork releases the
	// pool, then drops the network. The freed pool is the first's again,
	// although its last listing may still show the network.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(a.Log(), "subnets=2"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first instance did not list Docker's two networks within 20 s")
		}
	}
	releasePool(t, a, first.PoolID)
	docker.SetLive(netM)
	wantPool(t, "first instance's auto pool after its pool was released", a.AutoPool(false), first.Pool)
}
