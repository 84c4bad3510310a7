package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// host_address and a host route someone else holds: the host routes an
// address through one link, and underlay never replaces nor deletes a
// route it did not make. A Join whose address the host already routes
// through another link (an operator's route, another underlay instance's
// host link) is refused with 409 naming the holder and the fix, and
// leaves nothing; the repair leaves such a route alone, with a warning.

// joinAnswer sends a Join and returns the HTTP status and the error text
// ("" on success).
func joinAnswer(t *testing.T, d *itest.Daemon, netID, epID string) (int, string) {
	t.Helper()
	code, body, err := d.Post("/NetworkDriver.Join", network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/" + epID[:12]})
	if err != nil {
		t.Fatalf("Join %s: %v", epID[:12], err)
	}
	var e struct{ Err string }
	_ = json.Unmarshal(body, &e)
	return code, e.Err
}

// wantJoinRefused fails unless the Join answers 409 with every one of
// wants in its message.
func wantJoinRefused(t *testing.T, d *itest.Daemon, netID, epID string, wants ...string) {
	t.Helper()
	code, msg := joinAnswer(t, d, netID, epID)
	if code != http.StatusConflict {
		t.Fatalf("Join %s answered %d %q, want 409", epID[:12], code, msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Fatalf("Join %s answered %q, want it to mention %q", epID[:12], msg, w)
		}
	}
	t.Logf("409 %q", msg)
}

func createEndpoint(t *testing.T, d *itest.Daemon, netID, epID, addr string) {
	t.Helper()
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID,
		Interface: &network.EndpointInterface{Address: addr}}, nil)
}

// operatorRoute adds (or, with replace, replaces) a route to a through
// link, as an administrator would.
func operatorRoute(t *testing.T, ns *itest.Netns, a, link string, replace bool) {
	t.Helper()
	r := &netlink.Route{LinkIndex: ns.LinkIndex(link), Scope: netlink.SCOPE_LINK, Dst: prefixOf(netip.MustParseAddr(a))}
	add := ns.NL.RouteAdd
	if replace {
		add = ns.NL.RouteReplace
	}
	if err := add(r); err != nil {
		t.Fatalf("route %s through %s: %v", a, link, err)
	}
}

// through is routesTo's entry for a unicast route through link, metric 0.
func through(link string) string { return fmt.Sprintf("%s 0 %d", link, unix.RTN_UNICAST) }

const heldWarning = `msg="the host's route to a joined endpoint is held by another link`

// An operator's route to an endpoint's address through another link (vp1)
// exists before the Join: the Join is refused naming vp1 and the fix, the
// endpoint's link goes, and the route stays through the refusal,
// DeleteEndpoint and the repair of the host link. A route the operator
// takes from a joined endpoint is left to them by the repair, which warns
// once, naming it; Leave does not delete it.
func TestShimHostRouteHeldByAnOperator(t *testing.T) {
	t.Parallel() // its waits are deadlines, not bounds
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	const host = "198.18.1.2"
	a10, a11 := netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("198.18.1.11")
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	operatorRoute(t, ns, "198.18.1.10", "vp1", false)

	createEndpoint(t, d, netA, epA, "198.18.1.10/24")
	wantJoinRefused(t, d, netA, epA, "endpoint "+epA[:12], "198.18.1.10", "link vp1, which carries no underlay mark (an operator's route)", shim,
		"ip route del 198.18.1.10/32 dev vp1", "another address (--ip)")
	wantRoutesTo(t, ns, a10, through("vp1"))
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host) // no route through the host link
	ns.WantLinks(with(shim)...)                         // the endpoint's link went
	d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}, nil)
	wantRoutesTo(t, ns, a10, through("vp1"))

	// A joined endpoint whose route the operator then takes.
	d.Endpoint(netA, epB, "198.18.1.11/24", "", "")
	d.Endpoint(netA, epC, "198.18.1.12/24", "", "")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host, "198.18.1.11", "198.18.1.12")
	operatorRoute(t, ns, "198.18.1.11", "vp1", true)
	wantRoutesTo(t, ns, a11, through("vp1"))

	// The host link deleted: the repair makes it again with the route it
	// can put back, and leaves the operator's, warning once.
	for i := range 2 {
		idx := ns.LinkIndex(shim)
		ns.Delete(shim)
		if !itest.WaitFor(10*time.Second, func() bool {
			return ns.LinkIndex(shim) != idx && ns.LinkIndex(shim) != 0 && shimProblem(ns, shim, "macvlan", "vp0", mark, host, "198.18.1.12") == ""
		}) {
			t.Fatalf("repair %d: the host link is not back with its route within 10 s: %s", i, shimProblem(ns, shim, "macvlan", "vp0", mark, host, "198.18.1.12"))
		}
		if !d.WaitLog(10*time.Second, heldWarning) {
			t.Fatalf("repair %d: no warning about the held route within 10 s", i)
		}
		wantRoutesTo(t, ns, a10, through("vp1"))
		wantRoutesTo(t, ns, a11, through("vp1"))
	}
	warnings := strings.Count(d.Log(), heldWarning)
	if warnings != 1 {
		t.Fatalf("%d warnings about the held route over two repairs, want 1:\n%s", warnings, d.Log())
	}
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, heldWarning) {
			for _, w := range []string{"address=198.18.1.11", "host_link=" + shim, `holder="link vp1, `, "ip route del 198.18.1.11/32 dev vp1"} {
				if !strings.Contains(line, w) {
					t.Fatalf("the warning does not name %q: %s", w, line)
				}
			}
		}
	}

	// Leave and DeleteEndpoint delete only routes through the host link.
	d.RemoveEndpoint(netA, epB)
	d.RemoveEndpoint(netA, epC)
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host)
	wantRoutesTo(t, ns, a10, through("vp1"))
	wantRoutesTo(t, ns, a11, through("vp1"))
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	wantRoutesTo(t, ns, a10, through("vp1"))
	wantRecords(t, d, 0)
}

// Two instances (two state files, two sockets), each with a host_address
// network on vp0 and the same subnet: the second's endpoint with an
// address the first's joined endpoint has is refused, naming the first's
// host link and mark, and the first's route stays; once the first lets
// go, the second gets it, and the first is refused in turn. Two Joins of
// one address at once, one per instance: exactly one wins.
func TestShimHostRouteTwoInstances(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	a := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	b := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	markA, markB := instanceMark(t, a), instanceMark(t, b)
	shimA, shimB := shimLink(netA), shimLink(netB)
	a.MustCreateNetwork(hostNet(netA, "vp0", 1))
	nb := hostNet(netB, "vp0", 1)
	nb.Opts["host_address"], nb.AuxV4 = "198.18.1.3", []map[string]string{{"host": "198.18.1.3/24"}}
	b.MustCreateNetwork(nb)
	a10, a20 := netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("198.18.1.20")

	a.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	wantShim(t, ns, shimA, "macvlan", "vp0", markA, "198.18.1.2", "198.18.1.10")
	createEndpoint(t, b, netB, epB, "198.18.1.10/24")
	wantJoinRefused(t, b, netB, epB, "198.18.1.10", "link "+shimA, fmt.Sprintf("link %s, which carries the mark %q of another underlay instance", shimA, markA),
		"disconnect the other instance's container with address 198.18.1.10", "ip route del 198.18.1.10/32 dev "+shimA, shimB)
	wantRoutesTo(t, ns, a10, through(shimA))
	wantShim(t, ns, shimB, "macvlan", "vp0", markB, "198.18.1.3")
	ns.WantLinks("lo", "vp0", "vp0-peer", shimA, shimB, linkA) // B's endpoint link went
	b.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netB, EndpointID: epB}, nil)
	wantShim(t, ns, shimA, "macvlan", "vp0", markA, "198.18.1.2", "198.18.1.10")

	// A lets go: B gets the address; then A is refused, naming B's link.
	a.RemoveEndpoint(netA, epA)
	wantRoutesTo(t, ns, a10)
	b.Endpoint(netB, epB, "198.18.1.10/24", "", "")
	wantRoutesTo(t, ns, a10, through(shimB))
	createEndpoint(t, a, netA, epC, "198.18.1.10/24")
	wantJoinRefused(t, a, netA, epC, fmt.Sprintf("link %s, which carries the mark %q of another underlay instance", shimB, markB))
	wantRoutesTo(t, ns, a10, through(shimB))
	a.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epC}, nil)
	b.RemoveEndpoint(netB, epB)

	// One address, one Join per instance at once: one wins.
	createEndpoint(t, a, netA, epA, "198.18.1.20/24")
	createEndpoint(t, b, netB, epB, "198.18.1.20/24")
	ds, eps, nets := []*itest.Daemon{a, b}, []string{epA, epB}, []string{netA, netB}
	answers := itest.Concurrently(2, func(i int) string {
		code, msg := joinAnswer(t, ds[i], nets[i], eps[i])
		return fmt.Sprint(code, " ", msg)
	})
	won := -1
	for i, ans := range answers {
		switch {
		case strings.HasPrefix(ans, "200 "):
			if won >= 0 {
				t.Fatalf("both Joins of 198.18.1.20 succeeded; routes %v", routesTo(t, ns, a20))
			}
			won = i
		case !strings.HasPrefix(ans, "409 "):
			t.Fatalf("Join %d answered %q, want 200 or 409", i, ans)
		}
	}
	if won < 0 {
		t.Fatalf("neither Join of 198.18.1.20 succeeded: %q", answers)
	}
	wantRoutesTo(t, ns, a20, through([]string{shimA, shimB}[won]))
	if !strings.Contains(answers[1-won], "link "+[]string{shimA, shimB}[won]) {
		t.Fatalf("the losing Join answered %q, want it to name the winner's host link", answers[1-won])
	}
	t.Logf("instance %d won; the other: %s", won, answers[1-won])

	for i, d := range ds {
		if i == won {
			d.RemoveEndpoint(nets[i], eps[i])
		} else {
			d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: nets[i], EndpointID: eps[i]}, nil)
		}
	}
	a.DeleteNetwork(netA)
	b.DeleteNetwork(netB)
	ns.WantLinks("lo", "vp0", "vp0-peer")
	wantRoutesTo(t, ns, a10)
	wantRoutesTo(t, ns, a20)
}
