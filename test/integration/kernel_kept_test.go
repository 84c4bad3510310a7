package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
)

// The host as requests read it (netlinkutil's Keep): links, addresses and
// routes kept from the kernel's events answer as a fresh dump would, and
// a change the kernel made before a read began is in that read's answer
// at once (no waiting: that is the promise the requests rely on).

// hostDump is what a kernel read shows, as comparable text: each link of
// the namespace (as LinkByIndex and LinksOn answer, which leave out the
// alias and altnames), the addresses and the routes.
type hostDump struct{ links, addrs, routes []string }

// nameIndex is "name -> index" of the link LinkByName finds, or "name ->
// none".
func nameIndex(t *testing.T, k *netlinkutil.Kernel, name string) string {
	t.Helper()
	l, err := k.LinkByName(context.Background(), name)
	if errors.Is(err, netlinkutil.ErrNotFound) {
		return name + " -> none"
	}
	if err != nil {
		t.Fatalf("LinkByName %s: %v", name, err)
	}
	return fmt.Sprintf("%s -> %d %s", name, l.Index, l.Name)
}

func dumpHost(t *testing.T, k *netlinkutil.Kernel, indexes []int) hostDump {
	t.Helper()
	ctx := context.Background()
	var d hostDump
	for _, i := range indexes {
		l, err := k.LinkByIndex(ctx, i)
		if errors.Is(err, netlinkutil.ErrNotFound) {
			d.links = append(d.links, fmt.Sprintf("%d gone", i))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		on, err := k.LinksOn(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range on {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		line := func(l kernel.Link) string {
			return fmt.Sprintf("%d %s %s parent=%d vlan=%d mac=%s perm=%s mtu=%d down=%v alias=%q alt=%v", l.Index, l.Name, l.Kind, l.ParentIndex, l.VLAN, l.MAC, l.PermMAC, l.MTU, l.Down, l.Alias, l.AltNames)
		}
		// The same link by its name (LinkByName): what the parents'
		// lookups of a request read.
		byName, err := k.LinkByName(ctx, l.Name)
		if err != nil {
			t.Fatalf("LinkByName %s (index %d): %v", l.Name, l.Index, err)
		}
		d.links = append(d.links, fmt.Sprintf("%s on=%v byname=%s", line(l), names, line(byName)))
	}
	as, err := k.Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := k.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		d.addrs = append(d.addrs, fmt.Sprintf("%s@%d", a.Prefix, a.LinkIndex))
	}
	for _, r := range rs {
		d.routes = append(d.routes, fmt.Sprintf("%s via %s dev %d table %d metric %d", r.Dst, r.Gateway, r.LinkIndex, r.Table, r.Priority))
	}
	slices.Sort(d.addrs)
	slices.Sort(d.routes)
	return d
}

// wantKeptAsKernel waits (the kernel changes some things on its own:
// IPv6 link-local addresses and their routes after a carrier) until the
// kept state and fresh reads of the kernel agree, link by link.
func wantKeptAsKernel(t *testing.T, when string, kept, fresh *netlinkutil.Kernel) {
	t.Helper()
	var k, f hostDump
	if !itest.WaitFor(5*time.Second, func() bool {
		ls, err := fresh.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var indexes []int
		for _, l := range ls {
			indexes = append(indexes, l.Index)
		}
		indexes = append(indexes, 9999) // no such link
		k, f = dumpHost(t, kept, indexes), dumpHost(t, fresh, indexes)
		// Names by LinkByName, those of links gone or renamed away, an
		// altname and a name never used included: none may answer from
		// a stale name.
		for _, name := range []string{"p0", "p1", "mv0", "mv1", "mv-alt", "br0", "p0-peer", "nothere0"} {
			k.links = append(k.links, nameIndex(t, kept, name))
			f.links = append(f.links, nameIndex(t, fresh, name))
		}
		return slices.Equal(k.links, f.links) && slices.Equal(k.addrs, f.addrs) && slices.Equal(k.routes, f.routes)
	}) {
		t.Fatalf("%s: the kept state differs from the kernel's:\nlinks kept  %q\nlinks read  %q\naddrs kept  %q\naddrs read  %q\nroutes kept %q\nroutes read %q",
			when, k.links, f.links, k.addrs, f.addrs, k.routes, f.routes)
	}
}

func TestKeptHostFollowsTheKernel(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("p0", "p0-peer", 1500)
	kept, fresh := newKernel(t, ns), newKernel(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := kept.Keep(ctx, netlinkutil.KeepOptions{}); err != nil {
		t.Fatal(err)
	}
	wantKeptAsKernel(t, "at start", kept, fresh)
	// The kept links by index (Get and List ask the kernel).
	p0 := ns.MustLink("p0").Attrs().Index
	get := func(index int) kernel.Link {
		t.Helper()
		l, err := kept.LinkByIndex(ctx, index)
		if err != nil {
			t.Fatalf("kept LinkByIndex %d: %v", index, err)
		}
		return l
	}

	// The parent's MAC changes: the next read has it.
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	if err := ns.NL.LinkSetHardwareAddr(ns.MustLink("p0"), mac); err != nil {
		t.Fatal(err)
	}
	if got := get(p0).MAC; got != mac.String() {
		t.Fatalf("p0's MAC right after the change: kept %s, want %s", got, mac)
	}

	// An address and its connected route, and a route through it.
	ns.Up("p0")
	ns.AddAddr("p0", "198.18.30.1/24")
	_, dst, _ := net.ParseCIDR("198.18.31.0/24")
	if err := ns.NL.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP("198.18.30.254"), LinkIndex: p0}); err != nil {
		t.Fatal(err)
	}
	routesVia := func() []string {
		t.Helper()
		rs, err := kept.RoutesVia(ctx, p0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			if r.Dst.Addr().Is4() && r.Table == kernel.MainTable {
				out = append(out, r.Dst.String()+" via "+r.Gateway.String())
			}
		}
		slices.Sort(out)
		return out
	}
	if got := routesVia(); !slices.Contains(got, "198.18.30.0/24 via invalid IP") || !slices.Contains(got, "198.18.31.0/24 via 198.18.30.254") {
		t.Fatalf("IPv4 routes through p0 right after adding them: %q", got)
	}
	as, err := kept.Addrs(ctx)
	if err != nil || !slices.Contains(as, kernel.Addr{Prefix: mustPrefix("198.18.30.1/24"), LinkIndex: p0}) {
		t.Fatalf("addresses right after adding 198.18.30.1/24 to p0: %v %v", as, err)
	}
	wantKeptAsKernel(t, "after the address and routes", kept, fresh)

	// Routes the kernel removes without an event: one whose preferred
	// source was an address that goes; and a multipath route, one of
	// whose next hops' link goes down and up.
	ns.AddVeth("p1", "p1-peer", 1500)
	ns.Up("p1")
	ns.Up("p1-peer")
	ns.AddAddr("p1", "198.18.39.1/24")
	p1 := ns.MustLink("p1").Attrs().Index
	ns.AddAddr("p0", "198.18.36.1/24")
	_, srcDst, _ := net.ParseCIDR("198.18.38.0/24")
	if err := ns.NL.RouteAdd(&netlink.Route{Dst: srcDst, LinkIndex: p0, Scope: netlink.SCOPE_LINK, Src: net.ParseIP("198.18.36.1")}); err != nil {
		t.Fatal(err)
	}
	_, mpDst, _ := net.ParseCIDR("198.18.50.0/24")
	if err := ns.NL.RouteAdd(&netlink.Route{Dst: mpDst, MultiPath: []*netlink.NexthopInfo{
		{LinkIndex: p0, Gw: net.ParseIP("198.18.30.254")}, {LinkIndex: p1, Gw: net.ParseIP("198.18.39.254")}}}); err != nil {
		t.Fatal(err)
	}
	wantRoutesAsKernel := func(when string) {
		t.Helper()
		for _, idx := range []int{p0, p1} {
			k, err := kept.RoutesVia(ctx, idx)
			if err != nil {
				t.Fatal(err)
			}
			f, err := fresh.RoutesVia(ctx, idx)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := v4Routes(k), v4Routes(f); !slices.Equal(a, b) {
				t.Fatalf("%s: IPv4 routes through link %d: kept %q, the kernel %q", when, idx, a, b)
			}
		}
	}
	wantRoutesAsKernel("after the source route and the multipath route")
	if err := ns.NL.AddrDel(ns.MustLink("p0"), &netlink.Addr{IPNet: mustIPNet("198.18.36.1/24")}); err != nil {
		t.Fatal(err)
	}
	wantRoutesAsKernel("right after the source route's address went (the kernel drops the route without an event)")
	for _, up := range []bool{false, true} {
		f := ns.NL.LinkSetDown
		if up {
			f = ns.NL.LinkSetUp
		}
		if err := f(ns.MustLink("p1")); err != nil {
			t.Fatal(err)
		}
		wantRoutesAsKernel(fmt.Sprintf("right after p1 (a next hop of the multipath route) went up=%v", up))
	}

	// Links on the parent; a rename; an altname.
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: p0}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := ns.NL.LinkAdd(mv); err != nil {
		t.Fatal(err)
	}
	macvlansOn := func() []string {
		t.Helper()
		on, err := kept.LinksOn(ctx, p0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range on {
			if l.Kind == "macvlan" {
				out = append(out, l.Name)
			}
		}
		return out
	}
	if on := macvlansOn(); !slices.Equal(on, []string{"mv0"}) {
		t.Fatalf("macvlan links on p0 right after adding mv0: %q", on)
	}
	mv0 := ns.MustLink("mv0").Attrs().Index
	if err := ns.NL.LinkSetName(ns.MustLink("mv0"), "mv1"); err != nil {
		t.Fatal(err)
	}
	if l := get(mv0); l.Name != "mv1" || l.ParentIndex != p0 {
		t.Fatalf("mv0 right after its rename to mv1: %+v", l)
	}
	if l, err := kept.LinkByName(ctx, "mv1"); err != nil || l.Index != mv0 {
		t.Fatalf("LinkByName mv1 right after the rename: %+v %v, want index %d", l, err, mv0)
	}
	if l, err := kept.LinkByName(ctx, "mv0"); !errors.Is(err, netlinkutil.ErrNotFound) {
		t.Fatalf("LinkByName mv0 right after its rename to mv1: %+v %v, want not found", l, err)
	}
	// Marked while down, as underlay marks its links: the kernel does not
	// announce it, so kept links never carry an alias (Get has it).
	if err := ns.NL.LinkSetAlias(ns.MustLink("mv1"), "underlay:test"); err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.LinkAddAltName(ns.MustLink("mv1"), "mv-alt"); err != nil {
		t.Fatal(err)
	}
	if l := get(mv0); l.Alias != "" || len(l.AltNames) != 0 {
		t.Fatalf("kept mv1 carries alias %q and altnames %v: the kernel does not announce those on a down link, so kept links must carry none", l.Alias, l.AltNames)
	}
	if l, err := kept.Get(ctx, "mv-alt"); err != nil || l.Index != mv0 || l.Alias != "underlay:test" {
		t.Fatalf("Get mv-alt (mv1's altname) right after it was added: %+v %v, want mv1 with its alias", l, err)
	}
	if l, err := kept.LinkByName(ctx, "mv-alt"); err != nil || l.Index != mv0 || l.Name != "mv1" {
		t.Fatalf("LinkByName mv-alt (mv1's altname): %+v %v, want mv1 (the kernel asked for an altname)", l, err)
	}
	wantKeptAsKernel(t, "after mv1's rename, alias and altname", kept, fresh)

	// A bridge's port messages (AF_BRIDGE) are not the port's state: a
	// port leaving its bridge stays a link.
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := ns.NL.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.LinkSetMaster(ns.MustLink("p0-peer"), ns.MustLink("br0")); err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.LinkSetNoMaster(ns.MustLink("p0-peer")); err != nil {
		t.Fatal(err)
	}
	if l := get(ns.MustLink("p0-peer").Attrs().Index); l.Name != "p0-peer" {
		t.Fatalf("p0-peer after it left br0: %+v", l)
	}
	wantKeptAsKernel(t, "after a bridge took and let go p0-peer", kept, fresh)

	// Down: IPv4 drops the link's routes without an event.
	if err := ns.NL.LinkSetDown(ns.MustLink("p0")); err != nil {
		t.Fatal(err)
	}
	if got := routesVia(); slices.ContainsFunc(got, func(r string) bool {
		return strings.HasPrefix(r, "198.18.30.0/24") || strings.HasPrefix(r, "198.18.31.0/24")
	}) {
		t.Fatalf("main-table IPv4 routes through p0 right after it went down: %q, want its connected and gateway routes gone", got)
	}
	wantRoutesAsKernel("right after p0 went down (the multipath route stays, its next hop dead)")
	wantKeptAsKernel(t, "after p0 went down", kept, fresh)

	// Deletions.
	if err := ns.NL.AddrDel(ns.MustLink("p0"), &netlink.Addr{IPNet: mustIPNet("198.18.30.1/24")}); err != nil {
		t.Fatal(err)
	}
	ns.Delete("mv1")
	if on := macvlansOn(); len(on) != 0 {
		t.Fatalf("macvlan links on p0 right after deleting mv1: %q", on)
	}
	if as, _ := kept.Addrs(ctx); slices.ContainsFunc(as, func(a kernel.Addr) bool { return a.LinkIndex == p0 && a.Prefix.Addr().Is4() }) {
		t.Fatalf("p0 still has an IPv4 address right after its deletion: %v", as)
	}
	wantKeptAsKernel(t, "after the deletions", kept, fresh)
	if n := kept.Rereads(); n != 0 || !kept.Keeping() {
		t.Errorf("%d full re-reads without a missed event, kept state answering: %v (the answers above came from the kernel)", n, kept.Keeping())
	}
}

// v4Routes are the IPv4 routes of rs, as sorted text.
func v4Routes(rs []kernel.Route) []string {
	var out []string
	for _, r := range rs {
		if r.Dst.Addr().Is4() {
			out = append(out, fmt.Sprintf("%s via %s dev %d table %d metric %d", r.Dst, r.Gateway, r.LinkIndex, r.Table, r.Priority))
		}
	}
	slices.Sort(out)
	return out
}

// Events the socket had no room for (ENOBUFS) are recovered by reading
// everything again before the read answers: the answer is whole.
func TestKeptHostRereadsAfterMissedEvents(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	kept, fresh := newKernel(t, ns), newKernel(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Unfollowed, with the smallest buffer: the events wait on the socket
	// for the next read, and overflow it.
	if err := kept.Keep(ctx, netlinkutil.KeepOptions{Buffer: 1, Unfollowed: true}); err != nil {
		t.Fatal(err)
	}
	// A pair made and deleted first (its creation's events are what the
	// full socket still holds, its deletion's were dropped: they must not
	// bring it back), then pairs made, every other one deleted again.
	const pairs = 40
	var gone []int
	for i := range 2*pairs + 2 {
		ns.AddVeth(fmt.Sprintf("s%d", i), fmt.Sprintf("s%d-peer", i), 1500)
		ns.AddAddr(fmt.Sprintf("s%d", i), fmt.Sprintf("198.18.32.%d/32", i+1))
		if i%2 == 1 || i == 0 {
			gone = append(gone, ns.MustLink(fmt.Sprintf("s%d", i)).Attrs().Index, ns.MustLink(fmt.Sprintf("s%d-peer", i)).Attrs().Index)
			ns.Delete(fmt.Sprintf("s%d", i))
		}
	}
	as, err := kept.Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v4 := slices.DeleteFunc(slices.Clone(as), func(a kernel.Addr) bool { return !a.Prefix.Addr().Is4() || a.Prefix.Addr().IsLoopback() }); len(v4) != pairs {
		t.Fatalf("right after %d veth pairs with an IPv4 address each, the kept state has %d IPv4 addresses: %v", pairs, len(v4), v4)
	}
	last := ns.MustLink(fmt.Sprintf("s%d-peer", 2*pairs)).Attrs().Index
	if l, err := kept.LinkByIndex(ctx, last); err != nil || l.Name != fmt.Sprintf("s%d-peer", 2*pairs) {
		t.Fatalf("the last link kept, right after: %+v %v", l, err)
	}
	for _, idx := range gone {
		if l, err := kept.LinkByIndex(ctx, idx); !errors.Is(err, netlinkutil.ErrNotFound) {
			t.Fatalf("link %d, deleted before the read, is still kept: %+v %v", idx, l, err)
		}
	}
	if n := kept.Rereads(); n < 1 {
		t.Fatalf("no full re-read after %d veth pairs on a socket with the smallest buffer: the overflow was not seen", pairs)
	}
	wantKeptAsKernel(t, "after the overflow", kept, fresh)
}

// Through the binary: what the stable MAC and the probe default read of
// the host follows the host under a running daemon, at the next request.
// The parent vp0's MAC changes: the next endpoint's stable MAC is the new
// one's. A host address (and with it a connected route) on vp0 in the
// network's subnet turns the probe on for the next CreateEndpoint, which
// a LAN host's answer refuses; the address gone, the next one is taken
// unprobed again.
func TestKeptHostSeenByTheNextRequest(t *testing.T) {
	t.Parallel()
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "198.18.33.50/24") // a LAN host
	d := itest.StartDaemon(t, l.host, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": probeParent}, V4: []string{"198.18.33.0/24"}})
	create := func(ep, addr string) (network.CreateEndpointResponse, string) {
		t.Helper()
		var r network.CreateEndpointResponse
		msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: ep, Interface: &network.EndpointInterface{Address: addr}}, &r)
		return r, msg
	}
	remove := func(ep string) {
		t.Helper()
		d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep}, nil)
	}
	macOf := func(ep, addr string) net.HardwareAddr {
		t.Helper()
		r, msg := create(ep, addr)
		if msg != "" || r.Interface == nil {
			t.Fatalf("CreateEndpoint %s with %s: %q", ep, addr, msg)
		}
		m, err := net.ParseMAC(r.Interface.MacAddress)
		if err != nil {
			t.Fatalf("CreateEndpoint %s answered MAC %q", ep, r.Interface.MacAddress)
		}
		remove(ep)
		return m
	}
	before := macOf(epA, "198.18.33.10/24")
	if again := macOf(epB, "198.18.33.10/24"); !bytes.Equal(again, before) {
		t.Fatalf("the stable MAC of 198.18.33.10 is %s then %s", before, again)
	}
	if err := l.host.NL.LinkSetHardwareAddr(l.host.MustLink(probeParent), net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}); err != nil {
		t.Fatal(err)
	}
	after := macOf(epC, "198.18.33.10/24")
	if bytes.Equal(after, before) {
		t.Fatalf("the stable MAC of 198.18.33.10 stays %s after vp0's MAC changed: the change was not seen", before)
	}
	if again := macOf(epA, "198.18.33.10/24"); !bytes.Equal(again, after) {
		t.Fatalf("after vp0's MAC changed the stable MAC of 198.18.33.10 is %s then %s", after, again)
	}

	// The host is not on 198.18.33.0/24: the LAN host's address is taken
	// unprobed (the probe default is off there).
	if _, msg := create(epB, "198.18.33.50/24"); msg != "" {
		t.Fatalf("CreateEndpoint with 198.18.33.50 while the host is not on that LAN: %q, want it taken unprobed", msg)
	}
	remove(epB)
	l.host.AddAddr(probeParent, "198.18.33.1/24")
	_, msg := create(epC, "198.18.33.50/24")
	if !strings.Contains(msg, "198.18.33.50") || !strings.Contains(msg, l.lanMAC.String()) {
		t.Fatalf("CreateEndpoint with 198.18.33.50 right after the host joined that LAN: %q, want a refusal naming the address and the LAN host's MAC %s", msg, l.lanMAC)
	}
	if err := l.host.NL.AddrDel(l.host.MustLink(probeParent), &netlink.Addr{IPNet: mustIPNet("198.18.33.1/24")}); err != nil {
		t.Fatal(err)
	}
	if _, msg := create(epC, "198.18.33.50/24"); msg != "" {
		t.Fatalf("CreateEndpoint with 198.18.33.50 right after the host left that LAN: %q, want it taken unprobed", msg)
	}
	remove(epC)

	// The IPAM: a host address added to a pool's subnet under the running
	// daemon is never handed out, from the next request on (address_probe=0:
	// with the host on the subnet it is a LAN pool, probed otherwise).
	pool := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.34.0/24", Options: map[string]string{"address_probe": "0"}})
	first := d.MustRequestAddress(pool.PoolID, "", false)
	next, _ := netip.MustParsePrefix(first).Addr().Next().Prefix(32)
	l.host.AddAddr(probeParent, next.Addr().String()+"/24")
	if got := d.MustRequestAddress(pool.PoolID, "", false); strings.HasPrefix(got, next.Addr().String()+"/") {
		t.Fatalf("the IPAM handed out %s right after the host took it", got)
	}
	if _, code, msg := d.RequestAddress(pool.PoolID, next.Addr().String(), false); code == 200 || !strings.Contains(msg, next.Addr().String()) {
		t.Fatalf("RequestAddress of the host's own %s: %d %q, want a refusal naming it", next.Addr(), code, msg)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mustIPNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}
