package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A host link that exists but is broken is healed, through the real
// daemon: set down or flushed by an operator while the daemon runs (the
// watcher), both while it is down (the start), an unmarked leftover of its
// name (a crash while it was made), and a copy an operator renamed; a Join
// right after an operator broke it answers and routes.
func TestShimBrokenHostLinkIsHealed(t *testing.T) {
	// Serial: repairs are bounded (5 s).
	ns, d := setup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	shim := shimLink(netA)
	const host, ctr, ctr2 = "198.18.1.2", "198.18.1.10", "198.18.1.11"
	d.MustCreateNetwork(hostNet(netA, "vp0", 1))
	_, j := d.Endpoint(netA, epA, ctr+"/24", "", "")
	sb := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb, j, ctr+"/24")
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr)
	wantPings(t, "after the join", ns, host, sb, ctr)

	setDown := func() {
		t.Helper()
		if err := ns.NL.LinkSetDown(ns.MustLink(shim)); err != nil {
			t.Fatalf("set %s down: %v", shim, err)
		}
	}
	flush := func() {
		t.Helper()
		addrs, err := ns.NL.AddrList(ns.MustLink(shim), netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if err := ns.NL.AddrDel(ns.MustLink(shim), &a); err != nil {
				t.Fatalf("flush %s: %v", shim, err)
			}
		}
	}
	// Set down while the daemon runs (the kernel drops its routes too).
	setDown()
	took := waitShim(t, 5*time.Second, ns, shim, "macvlan", "vp0", mark, host, ctr)
	t.Logf("host link up again %s after it was set down", took.Round(time.Millisecond))
	wantPings(t, "after the host link was set down and healed", ns, host, sb, ctr)
	// Its address flushed while the daemon runs.
	flush()
	waitShim(t, 5*time.Second, ns, shim, "macvlan", "vp0", mark, host, ctr)
	wantPings(t, "after the host link's address was flushed and healed", ns, host, sb, ctr)
	// Two heals at least (the op's series exists from the start, at 0).
	healed := func() float64 {
		_, b, err := d.Get("/metrics")
		if err != nil {
			return 0
		}
		m, err := itest.Metrics(string(b))
		if err != nil {
			return 0
		}
		return m[`underlay_repair_actions_total{op="heal"}`]
	}
	if !itest.WaitFor(5*time.Second, func() bool { return healed() >= 2 }) {
		t.Fatalf(`underlay_repair_actions_total{op="heal"} is %v after two heals, want 2 or more`, healed())
	}

	// A Join right after an operator set it down and flushed it answers
	// (it failed with 500 "network is down" before) and routes.
	setDown()
	flush()
	_, j2 := d.Endpoint(netA, epB, ctr2+"/24", "", "")
	sb2 := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb2, j2, ctr2+"/24")
	waitShim(t, 5*time.Second, ns, shim, "macvlan", "vp0", mark, host, ctr, ctr2)
	wantPings(t, "a container joined while the host link was broken", ns, host, sb2, ctr2)

	// Both while the daemon is down (kill -9): the start heals it, before
	// serving, keeping the link.
	idx := ns.LinkIndex(shim)
	d.Kill()
	setDown()
	flush()
	d.Start()
	if got := wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr, ctr2); got != idx {
		t.Fatalf("the host link was re-made (index %d, was %d) where healing it was enough", got, idx)
	}
	wantMetric(t, d, `underlay_reconcile_actions_total{op="heal"} 1`)

	// An unmarked macvlan of the host link's name without an address (a
	// crash inside the host link's creation leaves one): made again.
	d.Kill()
	ns.Delete(shim)
	addMarkedMacvlan(t, ns, shim, "vp0", "")
	d.Start()
	wantShim(t, ns, shim, "macvlan", "vp0", mark, host, ctr, ctr2)
	wantPings(t, "after the unmarked leftover was replaced", ns, host, sb, ctr)

	// Renamed by an operator while the daemon runs: one host link per
	// network, under its own name.
	// The daemon sets a host link that is down up again within about
	// 100 ms: set down and renamed until the rename wins (EBUSY: it was up
	// again first; seen in the emulated arm64 VM, where the test can wait
	// longer than that between its two calls).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := ns.NL.LinkSetDown(ns.MustLink(shim)); err != nil {
			t.Fatal(err)
		}
		err := ns.NL.LinkSetName(ns.MustLink(shim), "myshim")
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("rename %s: %v", shim, err)
		}
	}
	waitShim(t, 5*time.Second, ns, shim, "macvlan", "vp0", mark, host, ctr, ctr2)
	deadline := time.Now().Add(5 * time.Second)
	for ns.Link("myshim") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the renamed copy of the host link still carries the network's address beside the new host link")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantPings(t, "after the host link was renamed", ns, host, sb, ctr)

	// Each repair is logged once, and the network's own deletion is no
	// repair: no "went away" line for it.
	before := strings.Count(d.Log(), "went away")
	d.RemoveEndpoint(netA, epA)
	d.RemoveEndpoint(netA, epB)
	d.DeleteNetwork(netA)
	time.Sleep(500 * time.Millisecond)
	if after := strings.Count(d.Log(), "went away"); after != before {
		t.Fatalf("DeleteNetwork's own deletion of the host link was logged as a repair event:\n%s", tailLog(d.Log(), 10))
	}
	if n := strings.Count(d.Log(), "put an owned link back in order"); n < 3 {
		t.Fatalf("%d heal lines logged, want one per repair (at least 3):\n%s", n, tailLog(d.Log(), 30))
	}
	ns.WantLinks(base...)
}

// wantMetric fails unless the daemon's metrics have a line starting so
// within 5 s: a repair is counted after its kernel changes, which the
// test may have seen first.
func wantMetric(t *testing.T, d *itest.Daemon, line string) {
	t.Helper()
	var body []byte
	if !itest.WaitFor(5*time.Second, func() bool {
		_, b, err := d.Get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body = b
		return strings.Contains(string(body), "\n"+line)
	}) {
		t.Fatalf("metrics lack %s:\n%s", line, body)
	}
}

// tailLog is the last n lines of a log.
func tailLog(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// A parent gone for good (a user's link deleted under a host-address
// network): the watcher waits for it without a repair pass, and a WARN
// line, per burst of unrelated link events: 100 endpoint cycles on
// another network log nothing more.
func TestShimParentGoneForGoodIsQuiet(t *testing.T) {
	// Serial: repairs are bounded (5 s) and WARN lines counted across timed windows.
	ns, d := setup(t, itest.DaemonOptions{})
	// lan_check=false: the LAN preflight's own WARN (a gone parent, a
	// gateway no one answers for on these veths) is not the repair's.
	d.MustCreateNetwork(hostNet(netA, "vp1", 1, "lan_check", "false"))
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0", "lan_check": "false"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	ns.Delete("vp1")
	time.Sleep(1500 * time.Millisecond) // the first pass fails and waits
	// The count starts once that pass has logged its failure: under load
	// it may come after the sleep.
	if !d.WaitLog(10*time.Second, "could not make the host link of a network") {
		t.Fatalf("the repair pass after vp1 went logged no failure to make the host link:\n%s", tailLog(d.Log(), 30))
	}
	warns := func() int { return strings.Count(d.Log(), "level=WARN") }
	before := warns()
	for i := 0; i < 100; i++ {
		ep := fmt.Sprintf("%012x%052d", 0xe0e0e0e00000+i, i)
		d.Endpoint(netB, ep, fmt.Sprintf("198.18.2.%d/24", 10+i), "", "")
		d.RemoveEndpoint(netB, ep)
	}
	time.Sleep(1500 * time.Millisecond)
	if got := warns() - before; got > 0 {
		t.Fatalf("%d WARN lines for 100 unrelated endpoint cycles while a parent is gone for good:\n%s", got, tailLog(d.Log(), 30))
	}
	// When the parent comes back, the host link does too.
	ns.AddVeth("vp1", "vp1-peer", 1500)
	waitShim(t, 5*time.Second, ns, shimLink(netA), "macvlan", "vp1", instanceMark(t, d), "198.18.1.2")
}
