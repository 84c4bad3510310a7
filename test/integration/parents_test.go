package integration

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Parent resolution on the host: a parent is the kernel link it names,
// whatever name it is asked by, and a macvlan or ipvlan link is no parent.

// createAnswer sends CreateNetwork and returns the HTTP status and the
// protocol error ("" on success).
func createAnswer(t *testing.T, d *itest.Daemon, n itest.Net) (int, string) {
	t.Helper()
	code, body, err := d.Post("/NetworkDriver.CreateNetwork", n.Request())
	if err != nil {
		t.Fatalf("CreateNetwork %s: %v", n.ID[:12], err)
	}
	if code == http.StatusOK {
		return code, ""
	}
	var e struct{ Err string }
	if err := json.Unmarshal(body, &e); err != nil || e.Err == "" {
		t.Fatalf("CreateNetwork %s answered %d with %q: want {\"Err\": ...}", n.ID[:12], code, body)
	}
	return code, e.Err
}

// wantCreateRefused fails unless CreateNetwork answers status with a
// message containing every one of wants.
func wantCreateRefused(t *testing.T, d *itest.Daemon, n itest.Net, status int, wants ...string) {
	t.Helper()
	code, msg := createAnswer(t, d, n)
	if code != status {
		t.Fatalf("CreateNetwork %s (%v) answered %d %q, want %d", n.ID[:12], n.Opts, code, msg, status)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Fatalf("CreateNetwork %s (%v) answered %q, want it to mention %q", n.ID[:12], n.Opts, msg, w)
		}
	}
}

// addAltname gives a link an alternative name (ip link property add dev
// LINK altname NAME).
func addAltname(t *testing.T, ns *itest.Netns, link, alt string) {
	t.Helper()
	if err := ns.NL.LinkAddAltName(ns.MustLink(link), alt); err != nil {
		t.Fatalf("add altname %s to %s: %v", alt, link, err)
	}
	if l := ns.Link(alt); l == nil || l.Attrs().Name != link {
		t.Fatalf("altname %s does not resolve to %s in the kernel (%v)", alt, link, l)
	}
}

// wantState stops the daemon, checks its state file against the kernel,
// starts it again and fails unless it stores exactly the networks ids with
// endpoints endpoints; it returns the state.
func wantState(t *testing.T, d *itest.Daemon, endpoints int, ids ...string) itest.State {
	t.Helper()
	s := d.CheckConsistent()
	got := s.NetworkIDs()
	if strings.Join(got, ",") != strings.Join(sortedCopy(ids), ",") || len(s.Endpoints) != endpoints {
		t.Fatalf("stored networks %v with %d endpoints, want %v with %d", got, len(s.Endpoints), sortedCopy(ids), endpoints)
	}
	return s
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

// A network asking for an altname of vp0 is a network on vp0: the rules
// decide against the networks on vp0, the refusal says which kernel link
// the name is and names the holder, and an accepted network's endpoint
// links hang off vp0.
func TestParentAltnameIsTheKernelLink(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	addAltname(t, ns, "vp0", "lan0")
	vp0 := ns.MustLink("vp0").Attrs().Index
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")

	// Each of these would be refused on vp0, so each is refused on lan0.
	for _, tc := range []struct {
		opts   map[string]string
		subnet string
		reason string
	}{
		{map[string]string{"parent": "lan0"}, "198.18.1.128/25", "overlaps"},
		{map[string]string{"parent": "lan0", "macvlan_mode": "passthru"}, "198.18.2.0/24", "exclusively"},
		{map[string]string{"parent": "lan0", "type": "ipvlan"}, "198.18.3.0/24", "never both"},
	} {
		wantCreateRefused(t, d, itest.Net{ID: netB, Opts: tc.opts, V4: []string{tc.subnet}}, http.StatusConflict,
			"parent lan0 (kernel link vp0)", "network aaaaaaaaaaaa", tc.reason, "docker network rm aaaaaaaaaaaa")
		ns.WantLinks(with(linkA)...)
	}
	wantState(t, d, 1, netA)

	// A compatible network on lan0 shares vp0 with A.
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan0", "macvlan_mode": "private"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	d.Endpoint(netB, epB, "198.18.2.10/24", "", "")
	ns.WantLinks(with(linkA, linkB)...)
	lb := ns.MustLink(linkB)
	if mv, ok := lb.(*netlink.Macvlan); !ok || mv.Mode != netlink.MACVLAN_MODE_PRIVATE || lb.Attrs().ParentIndex != vp0 {
		t.Fatalf("endpoint link %s of the network on lan0: %T on link index %d (%s), want a private macvlan on vp0 (index %d)",
			linkB, lb, lb.Attrs().ParentIndex, ns.ParentName(lb), vp0)
	}
	s := wantState(t, d, 2, netA, netB)
	if n := s.Networks[netB]; n.Parent != "vp0" || n.Options["parent"] != "lan0" {
		t.Fatalf("network on lan0 stored with link %q and option parent=%q, want vp0 and lan0", n.Parent, n.Options["parent"])
	}
	if len(s.Parents) != 0 {
		t.Fatalf("underlay owns parent links %v, want none (vp0 is the user's)", s.Parents)
	}

	// After a kill -9 the same request (Docker's replay) is the same network.
	d.Restart()
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan0", "macvlan_mode": "private"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	ns.WantLinks(with(linkA, linkB)...)

	// Deleting both leaves vp0 and its altname alone.
	d.DeleteNetwork(netB)
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	if l := ns.Link("lan0"); l == nil || l.Attrs().Index != vp0 {
		t.Fatalf("vp0 or its altname lan0 is gone after the networks were deleted: %v", l)
	}
	wantState(t, d, 0)
}

// The other way round: a passthru network asked on the altname holds vp0
// exclusively, so any network asked on vp0 is refused naming it.
func TestParentAltnamePassthruHoldsTheKernelLink(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	addAltname(t, ns, "vp0", "lan0")
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "lan0", "macvlan_mode": "passthru"}, V4: []string{"198.18.1.0/24"}})
	for _, opts := range []map[string]string{
		{"parent": "vp0"},
		{"parent": "vp0", "macvlan_mode": "private"},
		{"parent": "vp0", "macvlan_mode": "passthru"},
	} {
		wantCreateRefused(t, d, itest.Net{ID: netB, Opts: opts, V4: []string{"198.18.2.0/24"}}, http.StatusConflict,
			"parent vp0 is already used by network aaaaaaaaaaaa", "passthru", "docker network rm aaaaaaaaaaaa")
	}
	// A second altname is one more name for the same link.
	addAltname(t, ns, "vp0", "uplink0")
	wantCreateRefused(t, d, itest.Net{ID: netB, Opts: map[string]string{"parent": "uplink0"}, V4: []string{"198.18.2.0/24"}}, http.StatusConflict,
		"parent uplink0 (kernel link vp0)", "network aaaaaaaaaaaa", "exclusively")
	// vp1 is another link: free.
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp1"}, V4: []string{"198.18.2.0/24"}})
	ns.WantLinks(base...)
	wantState(t, d, 0, netA, netB)
}

// A macvlan link as parent is refused with 400, naming its lower link as
// the parent to use, directly, by an altname, or as the base of a VLAN;
// nothing is created or stored. An ipvlan link is refused alike (VM suite).
func TestParentMacvlanLinkRefused(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	if err := ns.NL.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mvx", ParentIndex: ns.MustLink("vp0").Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatal(err)
	}
	addAltname(t, ns, "mvx", "mvalt")
	mvx := ns.MustLink("mvx").Attrs().Index
	for _, tc := range []struct {
		opts  map[string]string
		wants []string
	}{
		{map[string]string{"parent": "mvx"}, []string{"parent mvx is a macvlan link on vp0", "-o parent=vp0"}},
		{map[string]string{"parent": "mvx", "type": "ipvlan"}, []string{"parent mvx is a macvlan link on vp0", "-o parent=vp0"}},
		{map[string]string{"parent": "mvalt"}, []string{"mvx is a macvlan link on vp0", "-o parent=vp0"}},
		{map[string]string{"parent": "mvx.10"}, []string{"mvx is a macvlan link on vp0", "-o parent=vp0"}},
	} {
		wantCreateRefused(t, d, itest.Net{ID: netA, Opts: tc.opts, V4: []string{"198.18.1.0/24"}}, http.StatusBadRequest, tc.wants...)
		ns.WantLinks(with("mvx")...)
	}
	if got := ns.MustLink("mvx").Attrs().Index; got != mvx {
		t.Fatalf("mvx changed (index %d, was %d)", got, mvx)
	}
	wantState(t, d, 0)

	// vp0 itself, with the user's macvlan on it, is a parent like any other.
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	if p := ns.ParentName(ns.MustLink(linkA)); p != "vp0" {
		t.Fatalf("endpoint on %s, want vp0", p)
	}
	d.DeleteNetwork(netA)
	ns.WantLinks(with("mvx")...)
	wantState(t, d, 0)
}

// A link that has the name underlay would give a VLAN it creates (vp0.10)
// but is not VLAN 10 on vp0 (a user's link that happens to carry the
// name): a network asking vp0.010 is refused naming the link, and the
// user's link is neither adopted, deleted nor recorded as underlay's, then,
// after the janitor's ticks, or at the next start. (The veth's peer is
// moved away, as into a container, so nothing stands on vp0.10 any more.)
func TestParentVLANNameTakenByAnotherLink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		add  func(t *testing.T, ns *itest.Netns)
	}{
		{"macvlan", func(t *testing.T, ns *itest.Netns) { addMarkedMacvlan(t, ns, "vp0.10", "vp1", "") }},
		{"veth", func(t *testing.T, ns *itest.Netns) {
			ns.AddVeth("vp0.10", "vp0.10p", 1500)
			ns.MoveLink("vp0.10p", itest.NewNetns(t), "vp0.10p")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, d := setup(t, itest.DaemonOptions{})
			tc.add(t, ns)
			before := linkStates(t, ns, "vp0.10")
			for _, p := range []string{"vp0.010", "vp0.0010"} {
				code, msg := createAnswer(t, d, itest.Net{ID: netA, Opts: map[string]string{"parent": p}, V4: []string{"198.18.1.0/24"}})
				if code != http.StatusBadRequest || !strings.Contains(msg, "vp0.10") || !strings.Contains(msg, "exists") {
					t.Fatalf("parent=%s with another link named vp0.10 answered %d %q: want a refusal saying vp0.10 exists", p, code, msg)
				}
				t.Logf("parent=%s answered %d %q", p, code, msg)
				wantSame(t, ns, "the refused create on "+p, before)
			}
			ns.WantLinks(with("vp0.10")...)
			time.Sleep(6 * time.Second) // one janitor tick (every 5 s)
			wantSame(t, ns, "the janitor's tick", before)
			if s := wantState(t, d, 0); len(s.Parents) != 0 {
				t.Fatalf("after the refused creates underlay owns parent links %v, want none", s.Parents)
			}
			d.Restart()
			wantSame(t, ns, "the restart", before)
			ns.WantLinks(with("vp0.10")...)
		})
	}
}
