package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Per-node parents through the real binary over the kernel's own links
// and routes: a candidate list takes the first link that exists, auto the
// link whose connected route holds the subnet (else the default route's),
// and a network that comes back after its link was renamed moves to the
// link its option means now.
func TestPerNodeParents(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	ns.AddAddr("vp0", "198.18.40.2/24")
	ns.AddAddr("vp1", "198.18.41.2/24")
	ns.AddRoute("default", "198.18.40.1", "vp0", 0)
	vp0, vp1 := ns.MustLink("vp0").Attrs().Index, ns.MustLink("vp1").Attrs().Index

	wantOn := func(link string, index int) {
		t.Helper()
		if got := ns.MustLink(link).Attrs().ParentIndex; got != index {
			t.Fatalf("endpoint link %s hangs off index %d (%s), want %d", link, got, ns.ParentName(ns.MustLink(link)), index)
		}
	}
	// auto: vp1's connected route holds 198.18.41.0/24.
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "auto"}, V4: []string{"198.18.41.0/25,198.18.41.1/24"}})
	d.Endpoint(netA, epA, "198.18.41.10/25", "", "")
	wantOn(linkA, vp1)
	var info network.InfoResponse
	d.MustCall("EndpointOperInfo", network.InfoRequest{NetworkID: netA, EndpointID: epA}, &info)
	if info.Value["parent"] != "vp1" || info.Value["parent_option"] != "auto" {
		t.Fatalf("EndpointOperInfo = %v, want parent vp1 and parent_option auto", info.Value)
	}
	// auto: no route holds 198.18.50.0/24, the default route is on vp0.
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "auto"}, V4: []string{"198.18.50.0/24,198.18.50.1/24"}})
	d.Endpoint(netB, epB, "198.18.50.10/24", "", "")
	wantOn(linkB, vp0)
	if log := d.Log(); !contains(log, "parent resolved on this host", "the IPv4 default route uses it") {
		t.Errorf("the log does not say which link auto chose and why")
	}
	// Candidates: the first one that exists.
	d.MustCreateNetwork(itest.Net{ID: netC, Opts: map[string]string{"parent": "lanz,vp1"}, V4: []string{"198.18.42.0/24,198.18.42.1/24"}})
	d.Endpoint(netC, epC, "198.18.42.10/24", "", "")
	wantOn(linkC, vp1)
	const netD = "dddddddddddd0000000000000000000000000000000000000000000000000004"
	wantCreateRefused(t, d, itest.Net{ID: netD, Opts: map[string]string{"parent": "lanx,lany"}, V4: []string{"198.18.43.0/24"}}, http.StatusBadRequest,
		"none of the parent candidates lanx, lany exists on this host", "vp0, vp0-peer, vp1, vp1-peer", "-o parent=lanx,lany,IFACE")
	s := wantState(t, d, 3, netA, netB, netC)
	if n := s.Networks[netC]; n.Parent != "vp1" || n.Options["parent"] != "lanz,vp1" {
		t.Fatalf("network C stored on %q with option %q, want vp1 and lanz,vp1", n.Parent, n.Options["parent"])
	}

	// The container of C goes, vp0 is renamed lanz (a reboot naming NICs
	// differently), and Docker creates C again after a kill -9: it moves
	// to lanz, the first candidate. (B, on vp0 by name, goes first: a
	// local network on a renamed link does not move by itself.)
	d.DeleteNetwork(netB)
	d.RemoveEndpoint(netC, epC)
	d.Kill()
	lk := ns.MustLink("vp0")
	for _, step := range []func() error{
		func() error { return ns.NL.LinkSetDown(lk) },
		func() error { return ns.NL.LinkSetName(lk, "lanz") },
		func() error { return ns.NL.LinkSetUp(ns.MustLink("lanz")) },
	} {
		if err := step(); err != nil {
			t.Fatalf("rename vp0 to lanz: %v", err)
		}
	}
	d.Start()
	d.MustCreateNetwork(itest.Net{ID: netC, Opts: map[string]string{"parent": "lanz,vp1"}, V4: []string{"198.18.42.0/24,198.18.42.1/24"}})
	d.Endpoint(netC, epC, "198.18.42.10/24", "", "")
	wantOn(linkC, vp0)
	if !contains(d.Log(), "moving the network there") {
		t.Errorf("the log does not say the network moved")
	}
	// A is untouched; C's record now names lanz and keeps the option.
	wantOn(linkA, vp1)
	s = wantState(t, d, 2, netA, netC)
	if n := s.Networks[netC]; n.Parent != "lanz" || n.Options["parent"] != "lanz,vp1" {
		t.Fatalf("network C stored on %q with option %q after the move, want lanz and lanz,vp1", n.Parent, n.Options["parent"])
	}
	for _, id := range []string{netA, netC} {
		d.DeleteNetwork(id)
	}
	ns.WantLinks("lo", "lanz", "vp0-peer", "vp1", "vp1-peer")
	if _, ok := ns.MustLink("lanz").(*netlink.Veth); !ok {
		t.Fatalf("lanz is not the user's veth any more")
	}
	wantState(t, d, 0)
}

// contains reports whether s holds every one of words.
func contains(s string, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
