package integration

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// host_address: the host reaching its own containers through its link on
// the parent (the shim, ulh + 12 characters of the network ID) with the
// address /32 and a /32 route to every joined endpoint. The host suite
// uses macvlan bridge networks on the veth parent vp0; the VM suite
// (vm_shim_test.go) adds VLAN parents and ipvlan.

// shimLink is the name underlay gives the host's link on network id.
func shimLink(id string) string { return "ulh" + id[:12] }

// hostNet is a macvlan bridge network on parent with 198.18.x.0/24,
// gateway .1, and host_address .2 reserved as Docker's aux address.
func hostNet(id, parent string, x int, opts ...string) itest.Net {
	o := map[string]string{"parent": parent, "host_address": fmt.Sprintf("198.18.%d.2", x)}
	for i := 0; i+1 < len(opts); i += 2 {
		o[opts[i]] = opts[i+1]
	}
	return itest.Net{ID: id, Opts: o, V4: []string{fmt.Sprintf("198.18.%d.0/24,198.18.%d.1/24", x, x)},
		AuxV4: []map[string]string{{"host": fmt.Sprintf("198.18.%d.2/24", x)}}}
}

// shimProblem says what is wrong with the host's link name: it must be an
// up link of kind on parent carrying the mark, with exactly the address
// addr/32 and exactly the /32 routes to routes in the main table; "" when
// it is all there.
func shimProblem(ns *itest.Netns, name, kind, parent, mark, addr string, routes ...string) string {
	l := ns.Link(name)
	if l == nil {
		return "link " + name + " is missing"
	}
	a := l.Attrs()
	switch {
	case l.Type() != kind:
		return fmt.Sprintf("link %s is a %s link, want %s", name, l.Type(), kind)
	case ns.ParentName(l) != parent:
		return fmt.Sprintf("link %s is on %s, want %s", name, ns.ParentName(l), parent)
	case a.Flags&net.FlagUp == 0:
		return fmt.Sprintf("link %s is down", name)
	case a.Alias != mark:
		return fmt.Sprintf("link %s carries alias %q, want the mark %q", name, a.Alias, mark)
	}
	if mv, ok := l.(*netlink.Macvlan); ok && mv.Mode != netlink.MACVLAN_MODE_BRIDGE {
		return fmt.Sprintf("macvlan %s in mode %v, want bridge", name, mv.Mode)
	}
	addrs, err := ns.NL.AddrList(l, unix.AF_INET)
	if err != nil {
		return fmt.Sprintf("addresses of %s: %v", name, err)
	}
	var got []string
	for _, ad := range addrs {
		got = append(got, ad.IPNet.String())
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{addr + "/32"}) {
		return fmt.Sprintf("link %s has IPv4 addresses %v, want [%s/32]", name, got, addr)
	}
	want := append([]string{}, routes...)
	sort.Strings(want)
	if got := hostRoutes(ns, name); fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Sprintf("routes through %s: %v, want %v", name, got, want)
	}
	return ""
}

// hostRoutes lists the /32 destinations routed through link (main table),
// sorted; nil when the link is missing.
func hostRoutes(ns *itest.Netns, link string) []string {
	l := ns.Link(link)
	if l == nil {
		return nil
	}
	rs, err := ns.NL.RouteList(l, unix.AF_INET)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, r := range rs {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones == 32 {
				out = append(out, r.Dst.IP.String())
			}
		}
	}
	sort.Strings(out)
	return out
}

// wantShim fails unless the host's link is as shimProblem wants.
func wantShim(t *testing.T, ns *itest.Netns, name, kind, parent, mark, addr string, routes ...string) int {
	t.Helper()
	if p := shimProblem(ns, name, kind, parent, mark, addr, routes...); p != "" {
		t.Fatal(p)
	}
	return ns.LinkIndex(name)
}

// waitShim polls until the host's link is as shimProblem wants, and fails
// with the last problem after within. It returns how long it took.
func waitShim(t *testing.T, within time.Duration, ns *itest.Netns, name, kind, parent, mark, addr string, routes ...string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		p := shimProblem(ns, name, kind, parent, mark, addr, routes...)
		if p == "" {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %s: %s", within, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantPings fails unless the host (src, in host) and the container (in sb)
// answer each other's ICMP echo requests.
func wantPings(t *testing.T, when string, host *itest.Netns, hostAddr string, sb *itest.Netns, ctrAddr string) {
	t.Helper()
	if err := itest.Ping(host, hostAddr, ctrAddr, 5*time.Second); err != nil {
		t.Fatalf("%s: host -> container: %v", when, err)
	}
	if err := itest.Ping(sb, ctrAddr, hostAddr, 5*time.Second); err != nil {
		t.Fatalf("%s: container -> host: %v", when, err)
	}
}

// A macvlan bridge network on vp0 with host_address 198.18.1.2: the host's
// link is there, marked, with the address and a /32 route to the joined
// endpoint, and the host and the container (its link moved into a
// namespace of its own as libnetwork does) ping each other. The link comes
// back with its route after a kill -9 during which it was deleted (and a
// lost route alone comes back too), and within 3 s when deleted while the
// daemon runs; Docker's replay of the create keeps it; Leave removes the
// route and DeleteNetwork the link, which then stays gone.
func TestShimHostAddressPingAndLifecycle(t *testing.T) {
	// Serial: the live repair is bounded (3 s).
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	const host, ctr = "198.18.1.2", "198.18.1.10"
	n := hostNet(netA, "vp0", 1)
	d.MustCreateNetwork(n)
	idx := wantShim(t, ns, shim, "macvlan", "vp0", mark, host)
	ns.WantLinks(with(shim)...)

	_, j := d.Endpoint(netA, epA, ctr+"/24", "", "")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr)
	if j.Gateway != "198.18.1.1" {
		t.Fatalf("Join answered gateway %q, want 198.18.1.1", j.Gateway)
	}
	sb := itest.NewNetns(t)
	eth := itest.JoinSandbox(ns, sb, j, ctr+"/24")
	ns.WantLinks(with(shim)...)
	wantPings(t, "after the join", ns, host, sb, ctr)

	// Docker replays the create (dockerd restart): the same link stays.
	for i := 0; i < 2; i++ {
		d.MustCreateNetwork(n)
	}
	if got := wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr); got != idx {
		t.Fatalf("the reused network's host link was re-made (index %d, was %d)", got, idx)
	}

	// kill -9, the link deleted while the daemon is down: the start makes
	// it again with its route, before serving.
	d.Kill()
	ns.Delete(shim)
	d.Start()
	idx = wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr)
	wantPings(t, "after the restart that re-made the host link", ns, host, sb, ctr)

	// kill -9, only the route deleted: the start puts it back.
	d.Kill()
	if err := ns.NL.RouteDel(&netlink.Route{LinkIndex: idx, Scope: netlink.SCOPE_LINK, Dst: &net.IPNet{IP: net.ParseIP(ctr).To4(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatalf("delete the route to %s: %v", ctr, err)
	}
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host)
	// The control: without the route, the host cannot answer the container.
	if err := itest.Ping(sb, ctr, host, time.Second); err == nil {
		t.Fatal("the container pinged the host without the host's route to it: then the pings would prove nothing")
	}
	d.Start()
	if got := wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr); got != idx {
		t.Fatalf("the host link was re-made (index %d, was %d) to put a route back", got, idx)
	}
	wantPings(t, "after the restart that put the route back", ns, host, sb, ctr)

	// Deleted while the daemon runs: the watcher makes it again.
	ns.Delete(shim)
	took := waitShim(t, 3*time.Second, ns, shim, "macvlan", "vp0", mark, host, ctr)
	t.Logf("host link re-made with its route %s after its deletion", took.Round(time.Millisecond))
	if ns.LinkIndex(shim) == idx {
		t.Fatal("the host link has its old index: it was never deleted?")
	}
	wantPings(t, "after the live repair", ns, host, sb, ctr)
	ns.WantLinks(with(shim)...)

	// Leave (after libnetwork moved the link back) removes the route only.
	itest.LeaveSandbox(ns, sb, eth, linkA)
	d.MustCall("Leave", network.LeaveRequest{NetworkID: netA, EndpointID: epA}, nil)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host)
	d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}, nil)
	ns.WantLinks(with(shim)...)

	// DeleteNetwork removes the link, and the watcher, seeing a marked link
	// go, does not bring it back.
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	time.Sleep(1500 * time.Millisecond)
	ns.WantLinks(base...)
	wantRecords(t, d, 0)
	ns.WantLinks(base...)
}

// An endpoint removed by DeleteEndpoint alone (no Leave) loses its route
// too, while a second endpoint keeps its own; a network without
// host_address on the same parent has no host link.
func TestShimHostAddressRoutesPerEndpoint(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	d.Endpoint(netA, epB, "198.18.1.11/24", "", "")
	d.Endpoint(netB, epC, "198.18.2.10/24", "", "")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2", "198.18.1.10", "198.18.1.11")
	ns.WantLinks(with(shim, linkA, linkB, linkC)...)
	d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}, nil)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2", "198.18.1.11")
	d.RemoveEndpoint(netA, epB)
	d.RemoveEndpoint(netB, epC)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2")
	d.DeleteNetwork(netA)
	d.DeleteNetwork(netB)
	ns.WantLinks(base...)
	wantRecords(t, d, 0)
}

// Every host_address the driver cannot honour is refused with 400 naming
// the fix, and leaves nothing behind.
func TestShimHostAddressRefusals(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	aux := func(a string) []map[string]string { return []map[string]string{{"host": a + "/24"}} }
	pool := []string{"198.18.1.0/24,198.18.1.1/24"}
	for _, tc := range []struct {
		name  string
		n     itest.Net
		wants []string
	}{
		{"IPv6", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "2001:db8:1::2"}, V4: pool, V6: []string{"2001:db8:1::/64"}},
			[]string{"not an IPv4 address", "such as 198.18.1.2"}},
		{"not an address", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "host"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{`"host" is not an IPv4 address`}},
		{"CIDR", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2/24"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"not an IPv4 address"}},
		{"outside the subnet", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.2.2"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"host_address=198.18.2.2 is in none of the network's IPv4 subnets", "--aux-address host=ADDR"}},
		{"the gateway", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.1"}, V4: pool, AuxV4: aux("198.18.1.1")},
			[]string{"host_address=198.18.1.1 is the gateway of 198.18.1.0/24", "--aux-address host=ADDR"}},
		{"no aux address", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2"}, V4: pool},
			[]string{"not reserved", "--aux-address host=198.18.1.2"}},
		{"another aux address", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2"}, V4: pool, AuxV4: aux("198.18.1.3")},
			[]string{"not reserved", "--aux-address host=198.18.1.2"}},
		{"macvlan private", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2", "macvlan_mode": "private"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs macvlan_mode=bridge", "private"}},
		{"macvlan vepa", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2", "macvlan_mode": "vepa"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs macvlan_mode=bridge", "vepa"}},
		{"macvlan passthru", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2", "macvlan_mode": "passthru"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs macvlan_mode=bridge", "passthru"}},
		{"ipvlan private", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2", "ipvlan_flag": "private"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs ipvlan_flag=bridge", "private"}},
		{"ipvlan vepa", itest.Net{Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2", "ipvlan_mode": "l3", "ipvlan_flag": "vepa"}, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs ipvlan_flag=bridge", "vepa"}},
		{"internal", itest.Net{Opts: map[string]string{"host_address": "198.18.1.2"}, Internal: true, V4: pool, AuxV4: aux("198.18.1.2")},
			[]string{"needs a parent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.n.ID = netA
			code, msg := createAnswer(t, d, tc.n)
			if code != http.StatusBadRequest {
				t.Fatalf("CreateNetwork (%v) answered %d %q, want 400", tc.n.Opts, code, msg)
			}
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Fatalf("CreateNetwork (%v) answered %q, want it to mention %q", tc.n.Opts, msg, w)
				}
			}
			t.Logf("400 %q", msg)
			ns.WantLinks(base...)
		})
	}
	// The aux address may carry any name, and be given without a mask.
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "host_address": "198.18.1.2"}, V4: pool,
		AuxV4: []map[string]string{{"router": "198.18.1.3/24", "me": "198.18.1.2"}}})
	ns.WantLinks(with(shimLink(netA))...)
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	wantRecords(t, d, 0)
}

// The same network ID created again with another host_address replaces the
// network (a stale duplicate): the host link then has only the new
// address; again without host_address, there is no host link.
func TestShimHostAddressReplaced(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2", "198.18.1.10")
	n := hostNet(netA, "vp0", 1)
	n.Opts["host_address"], n.AuxV4 = "198.18.1.3", []map[string]string{{"host": "198.18.1.3/24"}}
	d.MustCreateNetwork(n)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.3")
	ns.WantLinks(with(shim)...)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	ns.WantLinks(base...)
	d.DeleteNetwork(netA)
	wantRecords(t, d, 0)
}

// At start, a host-link-form link (ulh...) carrying the daemon's mark that
// no network owns is deleted as a stray; one without the mark, and the
// host link of a live network, are kept.
func TestShimStrayHostLinkRemovedAtStart(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	logged := instanceMark(t, d)
	shim := shimLink(netA)
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	d.Kill()
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mark := kernel.Mark(db.InstanceID())
	db.Close()
	if mark != logged {
		t.Fatalf("the state file's mark %q differs from the logged one %q", mark, logged)
	}
	const marked, unmarked, other = "ulh0123456789ab", "ulh0123456789ac", "ulh0123456789ad"
	addMarkedMacvlan(t, ns, marked, "vp0", mark)
	addMarkedMacvlan(t, ns, unmarked, "vp0", "")
	addMarkedMacvlan(t, ns, other, "vp0", kernel.Mark("0123456789abcdef"))
	before := linkStates(t, ns, shim, unmarked, other)
	d.Start()
	ns.WantLinks(with(shim, unmarked, other)...)
	wantSame(t, ns, "the start", before)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2")
	d.DeleteNetwork(netA)
	ns.WantLinks(with(unmarked, other)...)
}

// The host link on a parent underlay does not own goes with the parent;
// when the parent comes back (the administrator re-creates it), the
// watcher makes the host link again within 3 s.
func TestShimHostLinkBackWithItsParent(t *testing.T) {
	// Serial: the repair is bounded (3 s).
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	_, j := d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	sb := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb, j, "198.18.1.10/24")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2", "198.18.1.10")
	ns.Delete("vp0") // its peer, the host link and the container's link go too
	ns.WantLinks("lo", "vp1", "vp1-peer")
	time.Sleep(1500 * time.Millisecond) // the watcher retries and waits
	ns.WantLinks("lo", "vp1", "vp1-peer")
	ns.AddVeth("vp0", "vp0-peer", 1500)
	took := waitShim(t, 3*time.Second, ns, shim, "macvlan", "vp0", mark, "198.18.1.2", "198.18.1.10")
	t.Logf("host link back %s after its parent", took.Round(time.Millisecond))
	// The container's link died with vp0: Docker leaves and deletes the
	// endpoint, and a new container reaches the host again.
	d.RemoveEndpoint(netA, epA)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, "198.18.1.2")
	_, j = d.Endpoint(netA, epB, "198.18.1.11/24", "", "")
	sb2 := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb2, j, "198.18.1.11/24")
	wantPings(t, "a new container after the parent came back", ns, "198.18.1.2", sb2, "198.18.1.11")
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	wantRecords(t, d, 0)
}
