package integration

// The IPAM driver (/IpamDriver.* on the daemon's socket) through the real
// binary: the pools and addresses it hands out, what auto pools avoid,
// reservations and their expiry, kill -9, refusals, and libnetwork's order
// of calls when it creates a network with underlay as both drivers.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ipamBase is the range the tests' auto pools are cut from.
const ipamBase = "base=198.18.0.0/16,size=24"

// gatewayKey is the Data key of a pool's LAN gateway and the
// RequestAddressType of libnetwork's gateway request.
const gatewayKey = "com.docker.network.gateway"

// resolvConf writes a resolv.conf of the lines and returns its path: the
// daemon must never read the host's.
func resolvConf(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// ipamSetup is setup with auto pools cut from ipamBase, an empty
// resolv.conf and the extra serve flags.
func ipamSetup(t *testing.T, extra ...string) (*itest.Netns, *itest.Daemon) {
	t.Helper()
	args := append([]string{"--default-address-pool", ipamBase, "--resolv-conf", resolvConf(t, "# no nameservers")}, extra...)
	return setup(t, itest.DaemonOptions{Args: args})
}

func wantPool(t *testing.T, what string, got ipam.RequestPoolResponse, want string) {
	t.Helper()
	if got.Pool != want {
		t.Fatalf("%s: RequestPool answered pool %s (ID %s), want %s", what, got.Pool, got.PoolID, want)
	}
}

func releasePool(t *testing.T, d *itest.Daemon, id string) {
	t.Helper()
	d.MustIPAMCall("ReleasePool", ipam.ReleasePoolRequest{PoolID: id}, nil)
}

// requestAddresses sends n RequestAddress calls on the pool at once and
// returns the addresses handed out; it fails the test on any refusal or a
// duplicate.
func requestAddresses(t *testing.T, d *itest.Daemon, poolID string, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	errs := itest.Concurrently(n, func(i int) string {
		var resp ipam.RequestAddressResponse
		code, msg, err := d.TryIPAM("RequestAddress", ipam.RequestAddressRequest{PoolID: poolID}, &resp)
		switch {
		case err != nil:
			return err.Error()
		case msg != "":
			return fmt.Sprintf("answered %d: %s", code, msg)
		}
		addrs[i] = resp.Address
		return ""
	})
	for i, e := range errs {
		if e != "" {
			t.Fatalf("concurrent RequestAddress %d of %d on pool %s: %s", i, n, poolID, e)
		}
	}
	seen := map[string]int{}
	for i, a := range addrs {
		if j, dup := seen[a]; dup {
			t.Fatalf("concurrent RequestAddress %d and %d on pool %s both got %s", j, i, poolID, a)
		}
		seen[a] = i
	}
	return addrs
}

// plain strips the prefix length, as libnetwork sends addresses back.
func plain(cidr string) string {
	a, _, _ := strings.Cut(cidr, "/")
	return a
}

func TestIPAMActivateCapabilitiesAndSpaces(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	code, body, err := d.Post("/Plugin.Activate", nil)
	var act struct{ Implements []string }
	if err != nil || code != 200 || json.Unmarshal(body, &act) != nil {
		t.Fatalf("Activate: %d %s %v", code, body, err)
	}
	if !slices.Equal(act.Implements, []string{"NetworkDriver", "IpamDriver"}) {
		t.Fatalf("Activate answered Implements %q, want [NetworkDriver IpamDriver]", act.Implements)
	}

	var caps map[string]any
	d.MustIPAMCall("GetCapabilities", nil, &caps)
	if v, ok := caps["RequiresRequestReplay"]; !ok || v != false {
		t.Fatalf("IpamDriver.GetCapabilities answered %v: want RequiresRequestReplay false, present (the state is durable)", caps)
	}
	if v, ok := caps["RequiresMACAddress"]; ok && v != false {
		t.Fatalf("IpamDriver.GetCapabilities answered %v: want RequiresMACAddress false", caps)
	}

	var spaces ipam.AddressSpacesResponse
	d.MustIPAMCall("GetDefaultAddressSpaces", nil, &spaces)
	local, global := spaces.LocalDefaultAddressSpace, spaces.GlobalDefaultAddressSpace
	if local == "" || global == "" || local == global {
		t.Fatalf("GetDefaultAddressSpaces answered %+v: want a local and a global space, distinct", spaces)
	}
	// Docker sends these spaces back: a pool of each is handed out.
	l := d.MustRequestPool(ipam.RequestPoolRequest{AddressSpace: local})
	g := d.MustRequestPool(ipam.RequestPoolRequest{AddressSpace: global})
	if l.PoolID == g.PoolID || netip.MustParsePrefix(l.Pool).Overlaps(netip.MustParsePrefix(g.Pool)) {
		t.Fatalf("auto pools of the local and the global space: %+v and %+v, want distinct IDs and prefixes", l, g)
	}
	// A space that is not underlay's is refused, named.
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{AddressSpace: "LocalDefault"}); code != 400 || !strings.Contains(msg, "LocalDefault") {
		t.Fatalf("RequestPool in space LocalDefault answered %d %q: want 400 naming the space", code, msg)
	}
	// The network driver answers on the same socket, unknown routes 404.
	var ncaps network.CapabilitiesResponse
	d.MustCall("GetCapabilities", nil, &ncaps)
	if ncaps.Scope != "local" {
		t.Fatalf("NetworkDriver.GetCapabilities answered %+v", ncaps)
	}
	if code, body, _ := d.Post("/IpamDriver.Unknown", "{}"); code != 404 || !strings.Contains(string(body), "Err") {
		t.Fatalf("unknown IPAM route: %d %s", code, body)
	}
}

// TestIPAMAutoPoolAvoidsHostState plants, one at a time, everything an
// auto pool must not overlap and checks the next auto pool moves past it,
// and that default routes block nothing.
func TestIPAMAutoPoolAvoidsHostState(t *testing.T) {
	t.Parallel()
	conf := resolvConf(t, "# written by the test", "search example.test", "nameserver 198.18.0.53", "nameserver 2001:db8:100::53", "options ndots:2")
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--default-address-pool", ipamBase,
		"--default-address-pool", "base=2001:db8:100::/56,size=64", "--resolv-conf", conf}})
	// next requests an auto pool, wants it and releases it.
	next := func(after, want string) {
		t.Helper()
		p, code, msg := d.RequestPool(ipam.RequestPoolRequest{})
		if msg != "" {
			t.Fatalf("after %s: auto RequestPool answered %d: %s (want %s)", after, code, msg, want)
		}
		wantPool(t, "after "+after, p, want)
		releasePool(t, d, p.PoolID)
	}
	next("nameserver 198.18.0.53 in --resolv-conf", "198.18.1.0/24")
	// An address alone: without the kernel's local route that mirrors
	// it, so the address itself is what blocks its range.
	ns.AddAddr("vp0-peer", "198.18.1.7/32")
	local := &netlink.Route{LinkIndex: ns.LinkIndex("vp0-peer"), Dst: &net.IPNet{IP: net.IPv4(198, 18, 1, 7), Mask: net.CIDRMask(32, 32)},
		Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
	if err := ns.NL.RouteDel(local); err != nil {
		t.Fatalf("delete the local route of 198.18.1.7: %v", err)
	}
	next("address 198.18.1.7/32 on vp0-peer (no route)", "198.18.2.0/24")
	ns.AddRoute("198.18.2.0/24", "", "vp0", 0)
	next("on-link route 198.18.2.0/24 dev vp0", "198.18.3.0/24")
	ns.AddRoute("default", "198.18.2.254", "vp0", 0)
	ns.AddRoute("default", "", "vp1", 100)
	next("default routes (via 198.18.2.254 in main, on-link in table 100): they block nothing", "198.18.3.0/24")
	ns.AddRoute("198.18.3.0/24", "198.18.2.254", "vp0", 0)
	next("route 198.18.3.0/24 via 198.18.2.254", "198.18.4.0/24")
	ns.AddRoute("198.18.4.128/25", "", "vp1", 100)
	next("route 198.18.4.128/25 in table 100", "198.18.5.0/24")

	// Pools held and unexpired reservations.
	held := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.5.0/24"})
	wantPool(t, "explicit pool", held, "198.18.5.0/24")
	reserved := d.AutoPool(false)
	wantPool(t, "after explicit pool 198.18.5.0/24 held", reserved, "198.18.6.0/24")
	wantPool(t, "after reservation of 198.18.6.0/24", d.AutoPool(false), "198.18.7.0/24")
	ns.AddRoute("198.18.8.0/22", "198.18.2.254", "vp0", 0)
	wantPool(t, "after route 198.18.8.0/22", d.AutoPool(false), "198.18.12.0/24")
	releasePool(t, d, reserved.PoolID)
	wantPool(t, "after ReleasePool of the reservation of 198.18.6.0/24", d.AutoPool(false), "198.18.6.0/24")
	// A smaller size finds the free part of a blocked /24.
	wantPool(t, "size=26 with nameserver 198.18.0.53", d.MustRequestPool(ipam.RequestPoolRequest{Options: map[string]string{"size": "26"}}), "198.18.0.64/26")

	// IPv6: nameserver, address (with its connected route), a route of
	// another table; a default route blocks nothing.
	ns.AddAddr("vp1", "2001:db8:100:1::1/64")
	ns.AddRoute("2001:db8:100:2::/64", "", "vp1", 100)
	ns.AddRoute("default", "2001:db8:100:1::fe", "vp1", 0)
	wantPool(t, "IPv6 after nameserver 2001:db8:100::53, address 2001:db8:100:1::1/64, route 2001:db8:100:2::/64 table 100", d.AutoPool(true), "2001:db8:100:3::/64")
}

func TestIPAMConcurrentAutoPools(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	const n = 32
	pools := make([]ipam.RequestPoolResponse, n)
	errs := itest.Concurrently(n, func(i int) string {
		code, msg, err := d.TryIPAM("RequestPool", ipam.RequestPoolRequest{AddressSpace: "underlay-local"}, &pools[i])
		switch {
		case err != nil:
			return err.Error()
		case msg != "":
			return fmt.Sprintf("answered %d: %s", code, msg)
		}
		return ""
	})
	base := netip.MustParsePrefix("198.18.0.0/16")
	ids := map[string]string{}
	for i, p := range pools {
		if errs[i] != "" {
			t.Fatalf("concurrent auto RequestPool %d: %s", i, errs[i])
		}
		pi, err := netip.ParsePrefix(p.Pool)
		if err != nil || pi.Bits() != 24 || !base.Contains(pi.Addr()) || pi != pi.Masked() {
			t.Fatalf("concurrent auto RequestPool %d answered %+v: want a /24 of %s", i, p, base)
		}
		for j := range i {
			if netip.MustParsePrefix(pools[j].Pool).Overlaps(pi) {
				t.Fatalf("concurrent auto RequestPools %d and %d got overlapping pools %s and %s", j, i, pools[j].Pool, p.Pool)
			}
		}
		if _, dup := ids[p.PoolID]; dup {
			t.Fatalf("concurrent auto RequestPools got the same PoolID %s twice", p.PoolID)
		}
		ids[p.PoolID] = p.Pool
	}
	// The lowest free prefixes: exactly 198.18.0.0/24 to 198.18.31.0/24.
	var got []string
	for _, p := range pools {
		got = append(got, p.Pool)
	}
	sort.Slice(got, func(i, j int) bool {
		return netip.MustParsePrefix(got[i]).Addr().Less(netip.MustParsePrefix(got[j]).Addr())
	})
	for i, p := range got {
		if want := fmt.Sprintf("198.18.%d.0/24", i); p != want {
			t.Fatalf("concurrent auto pools %v: want 198.18.0.0/24 to 198.18.31.0/24", got)
		}
	}
	// The state file holds them, each under its ID, reserved.
	s := d.StopAndReadIPAM()
	if len(s.Pools) != n {
		t.Fatalf("state file holds %d pools, want %d", len(s.Pools), n)
	}
	for id, prefix := range ids {
		rec, ok := s.Pools[id]
		if !ok || rec.Prefix != prefix || !rec.Auto || rec.Pending == nil {
			t.Fatalf("state file holds pool %s as %+v (found %v): want auto, reserved, prefix %s", id, rec, ok, prefix)
		}
	}
}

func TestIPAMExplicitPoolOverlap(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	held := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.0/24"})
	wantPool(t, "explicit pool", held, "198.18.10.0/24")
	for _, pool := range []string{"198.18.10.0/24", "198.18.10.128/25", "198.18.8.0/22"} {
		_, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: pool})
		if code != 409 || !strings.Contains(msg, "198.18.10.0/24") || !strings.Contains(msg, held.PoolID) {
			t.Fatalf("RequestPool %s over held pool 198.18.10.0/24 (ID %s) answered %d %q: want 409 naming the held pool and its ID", pool, held.PoolID, code, msg)
		}
	}
	// Another parent is another wire: allowed; on that parent the same
	// rule holds.
	other := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.128/25", Options: map[string]string{"parent": "vp1"}})
	wantPool(t, "explicit pool on parent vp1", other, "198.18.10.128/25")
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.0/24", Options: map[string]string{"parent": "vp1"}}); code != 409 || !strings.Contains(msg, other.PoolID) {
		t.Fatalf("RequestPool 198.18.10.0/24 parent vp1 over pool %s of vp1 answered %d %q: want 409 naming it", other.PoolID, code, msg)
	}
	// An unexpired auto reservation is held as well.
	auto := d.AutoPool(false)
	wantPool(t, "auto pool", auto, "198.18.0.0/24")
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: "198.18.0.0/25"}); code != 409 || !strings.Contains(msg, auto.PoolID) {
		t.Fatalf("RequestPool 198.18.0.0/25 over reserved auto pool %s answered %d %q: want 409 naming it", auto.PoolID, code, msg)
	}
	// Released, the prefix is free again.
	releasePool(t, d, held.PoolID)
	wantPool(t, "after ReleasePool", d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.10.0/25"}), "198.18.10.0/25")
}

func TestIPAMParentPool(t *testing.T) {
	t.Parallel()
	ns, d := ipamSetup(t)
	ns.AddAddr("vp0", "198.18.20.2/29")
	ns.AddRoute("default", "198.18.20.1", "vp0", 0)
	ns.AddAddr("vp1", "198.18.21.5/24") // another LAN, no default route through it

	p := d.MustRequestPool(ipam.RequestPoolRequest{Options: map[string]string{"parent": "vp0"}})
	wantPool(t, "--ipam-opt parent=vp0 (198.18.20.2/29)", p, "198.18.20.0/29")
	if gw := p.Data[gatewayKey]; gw != "198.18.20.1/29" {
		t.Fatalf("pool of parent vp0 answered Data %v: want %s 198.18.20.1/29 (the default route's gateway)", p.Data, gatewayKey)
	}
	// Docker asks for no gateway then; the endpoints get every other
	// address of the LAN, never the host's own nor the gateway.
	var got []string
	for range 4 {
		got = append(got, d.MustRequestAddress(p.PoolID, "", false))
	}
	if want := []string{"198.18.20.3/29", "198.18.20.4/29", "198.18.20.5/29", "198.18.20.6/29"}; !slices.Equal(got, want) {
		t.Fatalf("addresses of the LAN of vp0: %v, want %v (not the host's 198.18.20.2 nor the gateway 198.18.20.1)", got, want)
	}
	if a, code, msg := d.RequestAddress(p.PoolID, "", false); code != 409 {
		t.Fatalf("RequestAddress on the full LAN answered %d %q %q: want 409", code, a, msg)
	}
	for _, a := range []string{"198.18.20.2", "198.18.20.1"} {
		if got, code, msg := d.RequestAddress(p.PoolID, a, false); code != 409 || !strings.Contains(msg, a) {
			t.Fatalf("RequestAddress %s (the host's or the gateway) answered %d %q %q: want 409 naming it", a, code, got, msg)
		}
	}
	// --gateway equal to the LAN's gateway: libnetwork asks for it as its
	// gateway.
	if gw := d.MustRequestAddress(p.PoolID, "198.18.20.1", true); gw != "198.18.20.1/29" {
		t.Fatalf("gateway request of 198.18.20.1 answered %s", gw)
	}
	// A second pool of the same LAN on the same parent overlaps it.
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Options: map[string]string{"parent": "vp0"}}); code != 409 || !strings.Contains(msg, p.PoolID) {
		t.Fatalf("second pool of parent vp0 answered %d %q: want 409 naming pool %s", code, msg, p.PoolID)
	}

	// vp1: no default route through it, no gateway; its host address is
	// skipped.
	q := d.MustRequestPool(ipam.RequestPoolRequest{Options: map[string]string{"parent": "vp1"}})
	wantPool(t, "--ipam-opt parent=vp1 (198.18.21.5/24)", q, "198.18.21.0/24")
	if gw, ok := q.Data[gatewayKey]; ok {
		t.Fatalf("pool of parent vp1 answered gateway %q: no default route goes through vp1", gw)
	}
	got = nil
	for range 5 {
		got = append(got, d.MustRequestAddress(q.PoolID, "", false))
	}
	if want := []string{"198.18.21.1/24", "198.18.21.2/24", "198.18.21.3/24", "198.18.21.4/24", "198.18.21.6/24"}; !slices.Equal(got, want) {
		t.Fatalf("addresses of the LAN of vp1: %v, want %v (not the host's 198.18.21.5)", got, want)
	}

	for _, tc := range []struct{ parent, want string }{{"vp0-peer", "vp0-peer"}, {"nosuch0", "nosuch0"}} {
		if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Options: map[string]string{"parent": tc.parent}}); code != 400 || !strings.Contains(msg, tc.want) {
			t.Fatalf("pool of parent %s (no IPv4 address / no such link) answered %d %q: want 400 naming it", tc.parent, code, msg)
		}
	}
}

func TestIPAMSubPoolAndConcurrentAddresses(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	p := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.30.0/24", SubPool: "198.18.30.128/28"})
	wantPool(t, "pool with SubPool", p, "198.18.30.0/24")
	var want []string
	for i := 128; i < 144; i++ {
		want = append(want, fmt.Sprintf("198.18.30.%d/24", i))
		if got := d.MustRequestAddress(p.PoolID, "", false); got != want[len(want)-1] {
			t.Fatalf("address %d of SubPool 198.18.30.128/28: %s, want %s", i-128, got, want[len(want)-1])
		}
	}
	if a, code, msg := d.RequestAddress(p.PoolID, "", false); code != 409 {
		t.Fatalf("RequestAddress with SubPool 198.18.30.128/28 used up answered %d %q %q: want 409", code, a, msg)
	}
	// A released address is handed out again.
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: p.PoolID, Address: "198.18.30.133"}, nil)
	if got := d.MustRequestAddress(p.PoolID, "", false); got != "198.18.30.133/24" {
		t.Fatalf("after ReleaseAddress 198.18.30.133: %s, want it again", got)
	}
	if _, code, msg := d.RequestPool(ipam.RequestPoolRequest{Pool: "198.18.40.0/24", SubPool: "198.18.41.0/28"}); code != 400 || !strings.Contains(msg, "198.18.41.0/28") {
		t.Fatalf("SubPool outside its pool answered %d %q: want 400 naming it", code, msg)
	}

	q := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.31.0/24"})
	addrs := requestAddresses(t, d, q.PoolID, 64)
	sort.Slice(addrs, func(i, j int) bool {
		return netip.MustParsePrefix(addrs[i]).Addr().Less(netip.MustParsePrefix(addrs[j]).Addr())
	})
	for i, a := range addrs {
		if w := fmt.Sprintf("198.18.31.%d/24", i+1); a != w {
			t.Fatalf("64 concurrent addresses of 198.18.31.0/24: %v, want the lowest usable, 198.18.31.1 to 198.18.31.64", addrs)
		}
	}
	s := d.StopAndReadIPAM()
	if got := len(s.Addresses[q.PoolID]); got != 64 {
		t.Fatalf("state file holds %d addresses of pool %s, want 64", got, q.PoolID)
	}
	if got := len(s.Addresses[p.PoolID]); got != 16 {
		t.Fatalf("state file holds %d addresses of pool %s, want 16", got, p.PoolID)
	}
}

func TestIPAMNetworkAndBroadcastNeverHandedOut(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	v4 := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.31.0/24"})
	v6 := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "2001:db8:31::/64", V6: true})
	for _, tc := range []struct{ pool, addr string }{
		{v4.PoolID, "198.18.31.0"}, {v4.PoolID, "198.18.31.255"}, {v6.PoolID, "2001:db8:31::"},
	} {
		for _, gateway := range []bool{false, true} {
			if got, code, msg := d.RequestAddress(tc.pool, tc.addr, gateway); msg == "" {
				t.Fatalf("DEFECT: RequestAddress with Address %s (gateway request %v), the network, broadcast or subnet-router anycast address of its pool, answered %d %q: "+
					"want a refusal naming it (Docker's default IPAM refuses them; a container or gateway on it breaks the LAN)", tc.addr, gateway, code, got)
			} else if !strings.Contains(msg, tc.addr) {
				t.Fatalf("RequestAddress %s refused with %q: want the address named", tc.addr, msg)
			}
		}
	}
	// Asked for nothing in particular, they are never picked either.
	if a := d.MustRequestAddress(v4.PoolID, "", true); a != "198.18.31.1/24" {
		t.Fatalf("gateway of 198.18.31.0/24: %s, want 198.18.31.1/24", a)
	}
	if a := d.MustRequestAddress(v6.PoolID, "", false); a != "2001:db8:31::1/64" {
		t.Fatalf("first address of 2001:db8:31::/64: %s, want 2001:db8:31::1/64", a)
	}
}

func TestIPAMReservationExpiry(t *testing.T) {
	// Serial: consecutive requests must fall within the 2 s reservation timeout.
	const timeout = 2 * time.Second
	_, d := ipamSetup(t, "--pool-reservation-timeout", timeout.String())
	unused := d.AutoPool(false)
	wantPool(t, "first auto pool", unused, "198.18.0.0/24")
	used := d.AutoPool(false)
	wantPool(t, "auto pool while 198.18.0.0/24 is reserved", used, "198.18.1.0/24")
	if gw := d.MustRequestAddress(used.PoolID, "", true); gw != "198.18.1.1/24" {
		t.Fatalf("gateway of %s: %s, want 198.18.1.1/24", used.Pool, gw)
	}
	time.Sleep(timeout + 500*time.Millisecond) // past the deadline of the unused pool, answered before

	// The unused reservation is free again; the used pool is not.
	again := d.AutoPool(false)
	wantPool(t, "auto pool after the reservation of 198.18.0.0/24 expired unused", again, "198.18.0.0/24")
	wantPool(t, "auto pool while 198.18.1.0/24 is in use", d.AutoPool(false), "198.18.2.0/24")
	if a, code, msg := d.RequestAddress(unused.PoolID, "", false); msg == "" || !strings.Contains(msg, unused.PoolID) {
		t.Fatalf("RequestAddress on the expired pool %s answered %d %q %q: want a refusal naming it", unused.PoolID, code, a, msg)
	}
	if a := d.MustRequestAddress(used.PoolID, "", false); a != "198.18.1.2/24" {
		t.Fatalf("address of the confirmed pool after the timeout: %s, want 198.18.1.2/24", a)
	}

	// An expired reservation an explicit pool took: RequestAddress on it
	// is refused (it must not be revived beside the pool that took its
	// place), and the explicit pool is untouched.
	late := d.AutoPool(false)
	wantPool(t, "auto pool", late, "198.18.3.0/24")
	time.Sleep(timeout + 500*time.Millisecond)
	took := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.3.0/24"})
	if a, code, msg := d.RequestAddress(late.PoolID, "", false); msg == "" || !(strings.Contains(msg, late.PoolID) || strings.Contains(msg, took.PoolID)) {
		t.Fatalf("RequestAddress on expired pool %s taken by %s answered %d %q %q: want a refusal naming either", late.PoolID, took.PoolID, code, a, msg)
	}
	if a := d.MustRequestAddress(took.PoolID, "", false); a != "198.18.3.1/24" {
		t.Fatalf("first address of the explicit pool that took 198.18.3.0/24: %s, want 198.18.3.1/24", a)
	}

	s := d.StopAndReadIPAM()
	if rec := s.Pools[used.PoolID]; rec.Pending != nil || rec.Prefix != "198.18.1.0/24" {
		t.Fatalf("state file holds the used pool as %+v: want confirmed (no reservation)", rec)
	}
	for _, id := range []string{unused.PoolID, late.PoolID} {
		if rec, ok := s.Pools[id]; ok && !rec.Expired(time.Now()) {
			t.Fatalf("state file holds the expired pool %s that another took as live: %+v", id, rec)
		}
		if as := s.Addresses[id]; len(as) > 0 {
			t.Fatalf("state file holds addresses %v of the expired pool %s", as, id)
		}
	}
	if got := s.Addresses[used.PoolID]; !slices.Equal(got, []string{"198.18.1.1", "198.18.1.2"}) {
		t.Fatalf("state file holds addresses %v of the used pool, want [198.18.1.1 198.18.1.2]", got)
	}
}

// TestIPAMExpiredReservationNotRevived: Docker reserved an auto pool and
// never used it (it died, or the create failed); after the reservation
// expired, a network takes the same prefix with --subnet. Its
// CreateNetwork must not confirm the dead reservation too: that would
// hold the prefix forever for a pool Docker never releases, and hand out
// the same addresses from two pools of one LAN.
func TestIPAMExpiredReservationNotRevived(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	_, d := ipamSetup(t, "--pool-reservation-timeout", timeout.String())
	dead := d.AutoPool(false)
	wantPool(t, "auto pool Docker never uses", dead, "198.18.0.0/24")
	time.Sleep(timeout + 500*time.Millisecond)

	// docker network create --subnet 198.18.0.0/24 -o parent=vp0
	taken := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.0.0/24"})
	gw := d.MustRequestAddress(taken.PoolID, "", true)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{taken.Pool + "," + gw}})
	first := d.MustRequestAddress(taken.PoolID, "", false)

	if a, code, msg := d.RequestAddress(dead.PoolID, "", false); msg == "" {
		t.Fatalf("DEFECT: after its reservation expired and pool %s took 198.18.0.0/24 for network %s, RequestAddress on the dead pool %s answered %d %s "+
			"(pool %s already handed out %s and %s): want a refusal; CreateNetwork confirmed the expired reservation of the same prefix",
			taken.PoolID, netA[:12], dead.PoolID, code, a, taken.PoolID, gw, first)
	}
	// docker network rm: the prefix is free again for auto pools.
	d.DeleteNetwork(netA)
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: taken.PoolID, Address: plain(first)}, nil)
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: taken.PoolID, Address: plain(gw)}, nil)
	releasePool(t, d, taken.PoolID)
	if p := d.AutoPool(false); p.Pool != "198.18.0.0/24" {
		t.Fatalf("DEFECT: after network %s was removed and its pool released, auto RequestPool answered %s, want 198.18.0.0/24: "+
			"the expired reservation %s, revived by CreateNetwork, holds the prefix and nothing will ever release it", netA[:12], p.Pool, dead.PoolID)
	}
}

// TestIPAMExpiredReservationNotRevivedByOtherIPAM: the same, when the
// network that takes the prefix comes from another IPAM driver (Docker's
// default, --subnet): underlay's IPAM hears nothing of it, and only the
// CreateNetwork names the prefix.
func TestIPAMExpiredReservationNotRevivedByOtherIPAM(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	_, d := ipamSetup(t, "--pool-reservation-timeout", timeout.String())
	dead := d.AutoPool(false)
	wantPool(t, "auto pool Docker never uses", dead, "198.18.0.0/24")
	time.Sleep(timeout + 500*time.Millisecond)
	// docker network create -d underlay --subnet 198.18.0.0/24 (default IPAM)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.0.0/24,198.18.0.1/24"}})
	d.DeleteNetwork(netA)
	if p := d.AutoPool(false); p.Pool != "198.18.0.0/24" {
		t.Fatalf("DEFECT: auto RequestPool answered %s, want 198.18.0.0/24: CreateNetwork of %s (another IPAM's pool 198.18.0.0/24) confirmed the expired reservation %s of the same prefix, "+
			"which now holds it forever (Docker never releases a pool it did not use)", p.Pool, netA[:12], dead.PoolID)
	}
}

func TestIPAMKill9KeepsReservationsAndAddresses(t *testing.T) {
	// Serial: the restart and a request must fall within the 6 s reservation timeout.
	const timeout = 6 * time.Second
	_, d := ipamSetup(t, "--pool-reservation-timeout", timeout.String())
	inUse := d.AutoPool(false)
	wantPool(t, "first auto pool", inUse, "198.18.0.0/24")
	before := requestAddresses(t, d, inUse.PoolID, 64)
	sent := time.Now()
	pending := d.AutoPool(false)
	answered := time.Now()
	wantPool(t, "auto pool to leave reserved", pending, "198.18.1.0/24")

	d.Restart() // SIGKILL with the reservation pending, then start again

	// Before its deadline the reservation still holds.
	other := d.AutoPool(false)
	if time.Since(sent) >= timeout {
		t.Fatalf("the restart and one request took %s, longer than the reservation (%s): nothing checked", time.Since(sent), timeout)
	}
	wantPool(t, "auto pool after kill -9, before the reservation's deadline", other, "198.18.2.0/24")
	// After it, the prefix is free.
	time.Sleep(time.Until(answered.Add(timeout + 500*time.Millisecond)))
	wantPool(t, "auto pool after kill -9, after the reservation's deadline", d.AutoPool(false), "198.18.1.0/24")
	if a, _, msg := d.RequestAddress(pending.PoolID, "", false); msg == "" {
		t.Fatalf("RequestAddress on the expired, retaken pool %s answered %s", pending.PoolID, a)
	}

	after := requestAddresses(t, d, inUse.PoolID, 64)
	seen := map[string]bool{}
	for _, a := range before {
		seen[a] = true
	}
	for _, a := range after {
		if seen[a] {
			t.Fatalf("address %s of pool %s was handed out before kill -9 and again after the restart", a, inUse.Pool)
		}
		seen[a] = true
	}
	s := d.StopAndReadIPAM()
	if got := len(s.Addresses[inUse.PoolID]); got != 128 {
		t.Fatalf("state file holds %d addresses of pool %s, want 128", got, inUse.PoolID)
	}
}

func TestIPAMRefusalsAndUnknownReleases(t *testing.T) {
	t.Parallel()
	_, d := ipamSetup(t)
	for _, tc := range []struct {
		req  ipam.RequestPoolRequest
		want string
	}{
		{ipam.RequestPoolRequest{Options: map[string]string{"bogus": "1"}}, "bogus"},
		{ipam.RequestPoolRequest{Options: map[string]string{"parent": "vp0", "mode": "bridge"}}, "mode"},
		{ipam.RequestPoolRequest{Pool: "198.18.0.0/33"}, "198.18.0.0/33"},
		{ipam.RequestPoolRequest{Pool: "not-a-subnet"}, "not-a-subnet"},
		{ipam.RequestPoolRequest{Pool: "198.18.0.0"}, "198.18.0.0"},
		{ipam.RequestPoolRequest{Pool: "2001:db8::/64"}, "2001:db8::/64"},
		{ipam.RequestPoolRequest{Pool: "198.18.0.0/24", V6: true}, "198.18.0.0/24"},
		{ipam.RequestPoolRequest{Pool: "198.18.0.0/24", SubPool: "198.18.1.0/28"}, "198.18.1.0/28"},
		{ipam.RequestPoolRequest{Options: map[string]string{"size": "31"}}, "size=31"},
		{ipam.RequestPoolRequest{Options: map[string]string{"size": "0"}}, "size=0"},
		{ipam.RequestPoolRequest{Options: map[string]string{"size": "abc"}}, "size=abc"},
		{ipam.RequestPoolRequest{Options: map[string]string{"size": "8"}}, "size=8"},
		{ipam.RequestPoolRequest{Pool: "198.18.0.0/24", Options: map[string]string{"size": "26"}}, "size=26"},
		{ipam.RequestPoolRequest{V6: true, Options: map[string]string{"size6": "130"}}, "size6=130"},
		{ipam.RequestPoolRequest{V6: true}, "--default-address-pool"},
	} {
		if p, code, msg := d.RequestPool(tc.req); code != 400 || !strings.Contains(msg, tc.want) {
			t.Fatalf("RequestPool %+v answered %d %q %+v: want 400 naming %q", tc.req, code, msg, p, tc.want)
		}
	}
	if code, body, _ := d.Post("/IpamDriver.RequestPool", "{not json"); code != 400 {
		t.Fatalf("malformed RequestPool body answered %d %s: want 400", code, body)
	}
	p := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.50.0/24"})
	for _, a := range []string{"not-an-ip", "198.18.51.1"} {
		if got, code, msg := d.RequestAddress(p.PoolID, a, false); code != 400 || !strings.Contains(msg, a) {
			t.Fatalf("RequestAddress %q on pool 198.18.50.0/24 answered %d %q %q: want 400 naming it", a, code, got, msg)
		}
	}
	if got, code, msg := d.RequestAddress("0123456789abcdef", "", false); msg == "" || !strings.Contains(msg, "0123456789abcdef") {
		t.Fatalf("RequestAddress on an unknown pool answered %d %q %q: want a refusal naming it", code, got, msg)
	}
	// Releases of what underlay does not hold answer {}.
	for _, r := range []struct {
		route string
		req   any
	}{
		{"ReleasePool", ipam.ReleasePoolRequest{PoolID: "0123456789abcdef"}},
		{"ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: "0123456789abcdef", Address: "198.18.50.9"}},
		{"ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: p.PoolID, Address: "198.18.50.9"}},
	} {
		code, body, err := d.Post("/IpamDriver."+r.route, r.req)
		if err != nil || code != 200 || strings.TrimSpace(string(body)) != "{}" {
			t.Fatalf("%s %+v answered %d %s %v: want 200 {}", r.route, r.req, code, body, err)
		}
	}
	// None of it changed the state: only the explicit pool is held.
	s := d.StopAndReadIPAM()
	if len(s.Pools) != 1 || s.Pools[p.PoolID].Prefix != "198.18.50.0/24" || len(s.Addresses) != 0 {
		t.Fatalf("state file after refusals holds %+v: want only pool %s, no addresses", s, p.PoolID)
	}
}

func TestIPAMBasesFromEnvironmentAndFlags(t *testing.T) {
	t.Parallel()
	empty := resolvConf(t)
	env := []string{"DEFAULT_ADDRESS_POOLS=base=198.18.64.0/18,size=26 base=2001:db8:200::/48,size=64"}
	e := itest.StartDaemon(t, itest.NewNetns(t), itest.DaemonOptions{Env: env, Args: []string{"--resolv-conf", empty}})
	wantPool(t, "DEFAULT_ADDRESS_POOLS, IPv4", e.AutoPool(false), "198.18.64.0/26")
	wantPool(t, "DEFAULT_ADDRESS_POOLS, IPv6", e.AutoPool(true), "2001:db8:200::/64")

	// Flags replace the environment's list.
	f := itest.StartDaemon(t, itest.NewNetns(t), itest.DaemonOptions{Env: env, Args: []string{"--resolv-conf", empty, "--default-address-pool", "base=198.19.0.0/16,size=24"}})
	wantPool(t, "--default-address-pool over DEFAULT_ADDRESS_POOLS", f.AutoPool(false), "198.19.0.0/24")
	if _, code, msg := f.RequestPool(ipam.RequestPoolRequest{V6: true}); code != 400 {
		t.Fatalf("IPv6 auto pool with only an IPv4 base from the flags answered %d %q: want 400", code, msg)
	}

	// Several bases: the lowest free prefix in address order, whatever
	// the order of the flags, then the next base.
	m := itest.StartDaemon(t, itest.NewNetns(t), itest.DaemonOptions{Args: []string{"--resolv-conf", empty,
		"--default-address-pool", "base=198.19.0.0/24,size=25", "--default-address-pool", "base=198.18.0.0/24,size=25"}})
	for _, want := range []string{"198.18.0.0/25", "198.18.0.128/25", "198.19.0.0/25", "198.19.0.128/25"} {
		wantPool(t, "two bases", m.AutoPool(false), want)
	}
	if p, code, msg := m.RequestPool(ipam.RequestPoolRequest{}); msg == "" || !strings.Contains(msg, "--default-address-pool") {
		t.Fatalf("auto pool with both bases used up answered %d %q %+v: want a refusal pointing at --default-address-pool", code, msg, p)
	}

	// A malformed base or timeout stops the daemon before it serves.
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--default-address-pool", "base=198.18.0.0/16,size=33"}, "size 33"},
		{nil, []string{"--default-address-pool", "base=198.18.0.1/16,size=24"}, "198.18.0.1/16"},
		{[]string{"DEFAULT_ADDRESS_POOLS=base=198.18.0.0/16"}, nil, "base=198.18.0.0/16"},
		{[]string{"POOL_RESERVATION_TIMEOUT=soon"}, nil, "soon"},
		{nil, []string{"--pool-reservation-timeout", "-1s"}, "-1s"},
	} {
		dir := t.TempDir()
		cmd := e.Command(tc.env, append([]string{"serve", "--socket", filepath.Join(dir, "s.sock"), "--state", filepath.Join(dir, "s.db")}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Fatalf("serve with %v %v: %v, output %q: want exit status 2 naming %q", tc.env, tc.args, err, out, tc.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "s.sock")); err == nil {
			t.Fatalf("serve with %v %v left a socket", tc.env, tc.args)
		}
	}
}

// TestIPAMNetworkCreateFlow makes a network as libnetwork does with
// underlay as both its IPAM and its network driver, past the reservation
// timeout, and removes it in libnetwork's order.
func TestIPAMNetworkCreateFlow(t *testing.T) {
	// Serial: consecutive requests must fall within the 2 s reservation timeout.
	const timeout = 2 * time.Second
	ns, d := ipamSetup(t, "--pool-reservation-timeout", timeout.String())
	var spaces ipam.AddressSpacesResponse
	d.MustIPAMCall("GetDefaultAddressSpaces", nil, &spaces)
	space := spaces.LocalDefaultAddressSpace

	// docker network create -d underlay --ipam-driver underlay -o parent=vp0 netA
	pool := d.MustRequestPool(ipam.RequestPoolRequest{AddressSpace: space})
	wantPool(t, "auto pool of the network", pool, "198.18.0.0/24")
	gw := d.MustRequestAddress(pool.PoolID, "", true)
	if gw != "198.18.0.1/24" {
		t.Fatalf("gateway of %s: %s, want 198.18.0.1/24", pool.Pool, gw)
	}
	req := itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{pool.Pool + "," + gw}}.Request()
	req.IPv4Data[0].AddressSpace = space
	d.MustCall("CreateNetwork", req, nil)
	// docker run --network netA
	addr := d.MustRequestAddress(pool.PoolID, "", false)
	if addr != "198.18.0.2/24" {
		t.Fatalf("endpoint address of %s: %s, want 198.18.0.2/24", pool.Pool, addr)
	}
	d.Endpoint(netA, epA, addr, "", "")
	if p := ns.ParentName(ns.MustLink(linkA)); p != "vp0" {
		t.Fatalf("endpoint link %s on %s, want vp0", linkA, p)
	}

	// A network whose pool only CreateNetwork names (no address asked
	// yet): CreateNetwork confirms it as well.
	named := d.AutoPool(false)
	wantPool(t, "auto pool of the second network", named, "198.18.1.0/24")
	reqB := itest.Net{ID: netB, Opts: map[string]string{"parent": "vp1"}, V4: []string{named.Pool}}.Request()
	reqB.IPv4Data[0].AddressSpace = space
	d.MustCall("CreateNetwork", reqB, nil)
	confirmed := time.Now()

	time.Sleep(time.Until(confirmed.Add(timeout + 500*time.Millisecond)))
	wantPool(t, "auto pool past the reservation timeout, both networks' pools in use", d.AutoPool(false), "198.18.2.0/24")
	if a := d.MustRequestAddress(pool.PoolID, "", false); a != "198.18.0.3/24" {
		t.Fatalf("address of the network's pool past the timeout: %s, want 198.18.0.3/24", a)
	}
	if a := d.MustRequestAddress(named.PoolID, "", false); a != "198.18.1.1/24" {
		t.Fatalf("address of the second network's pool past the timeout: %s, want 198.18.1.1/24", a)
	}
	s := d.StopAndReadIPAM()
	for _, p := range []ipam.RequestPoolResponse{pool, named} {
		if rec, ok := s.Pools[p.PoolID]; !ok || rec.Pending != nil || rec.Prefix != p.Pool || !rec.Auto {
			t.Fatalf("state file holds pool %s as %+v (found %v): want auto, confirmed, %s", p.PoolID, rec, ok, p.Pool)
		}
	}
	if got := s.Addresses[pool.PoolID]; !slices.Equal(got, []string{"198.18.0.1", "198.18.0.2", "198.18.0.3"}) {
		t.Fatalf("state file holds addresses %v of %s, want the gateway and two endpoints", got, pool.Pool)
	}

	// docker rm; docker network rm: libnetwork's order.
	d.RemoveEndpoint(netA, epA)
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: pool.PoolID, Address: plain(addr)}, nil)
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: pool.PoolID, Address: "198.18.0.3"}, nil)
	d.DeleteNetwork(netA)
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: pool.PoolID, Address: plain(gw)}, nil)
	releasePool(t, d, pool.PoolID)
	ns.WantLinks(base...)
	wantPool(t, "auto pool after the network was removed", d.AutoPool(false), "198.18.0.0/24")
	if _, ok := d.StopAndReadIPAM().Pools[pool.PoolID]; ok {
		t.Fatalf("state file still holds the released pool %s", pool.PoolID)
	}
}
