package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Two underlay instances in one namespace, each with its own state file
// and socket: every link an instance creates carries its mark, and an
// instance's start deletes only links carrying its own mark that its
// records do not know, never the other instance's links nor unmarked ones.

var markRE = regexp.MustCompile(`msg="state restored and reconciled with the kernel".* mark=([0-9a-f]+)`)

// instanceMark returns the IFLA_IFALIAS a daemon marks its links with,
// "underlay:" + the instance ID its start logged.
func instanceMark(t *testing.T, d *itest.Daemon) string {
	t.Helper()
	m := markRE.FindAllStringSubmatch(d.Log(), -1)
	if len(m) == 0 {
		t.Fatalf("the daemon did not log its mark at start:\n%s", d.Log())
	}
	// Every start of one state file logs the same instance ID.
	for _, s := range m {
		if s[1] != m[0][1] {
			t.Fatalf("the daemon logged marks %q and %q for one state file", m[0][1], s[1])
		}
	}
	return "underlay:" + m[0][1]
}

// linkState is what the test follows of a link: its index (a re-created
// link gets a new one) and its alias.
type linkState struct {
	index int
	alias string
}

func linkStates(t *testing.T, ns *itest.Netns, names ...string) map[string]linkState {
	t.Helper()
	out := map[string]linkState{}
	for _, n := range names {
		a := ns.MustLink(n).Attrs()
		out[n] = linkState{a.Index, a.Alias}
	}
	return out
}

// wantSame fails unless the links are still there, unchanged.
func wantSame(t *testing.T, ns *itest.Netns, when string, before map[string]linkState) {
	t.Helper()
	for n, b := range before {
		l := ns.Link(n)
		if l == nil {
			t.Fatalf("%s: link %s (alias %q) was deleted", when, n, b.alias)
		}
		if got := (linkState{l.Attrs().Index, l.Attrs().Alias}); got != b {
			t.Fatalf("%s: link %s is now %+v, was %+v", when, n, got, b)
		}
	}
}

// addMarkedMacvlan adds a macvlan on parent carrying alias (none when "").
func addMarkedMacvlan(t *testing.T, ns *itest.Netns, name, parent, alias string) {
	t.Helper()
	l := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: ns.MustLink(parent).Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := ns.NL.LinkAdd(l); err != nil {
		t.Fatalf("add macvlan %s: %v", name, err)
	}
	if alias != "" {
		if err := ns.NL.LinkSetAlias(ns.MustLink(name), alias); err != nil {
			t.Fatalf("set alias of %s: %v", name, err)
		}
	}
}

func TestInstancesTwoDaemonsOneNamespace(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	ns.AddVeth("vp1", "vp1-peer", 9000)

	// A starts alone and makes a network on vp0 with a joined endpoint.
	a := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	markA := instanceMark(t, a)
	a.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	a.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	linksA := linkStates(t, ns, linkA)
	if linksA[linkA].alias != markA {
		t.Fatalf("A's endpoint link %s carries alias %q, want A's mark %q", linkA, linksA[linkA].alias, markA)
	}

	// B's first start (a new state file, so a new mark) leaves A's link.
	b := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	markB := instanceMark(t, b)
	if markA == markB || !strings.HasPrefix(markB, "underlay:") {
		t.Fatalf("instances A and B have marks %q and %q: want two different underlay marks", markA, markB)
	}
	wantSame(t, ns, "B's first start", linksA)
	b.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp1"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	b.Endpoint(netB, epB, "198.18.2.10/24", "", "")
	linksB := linkStates(t, ns, linkB)
	if linksB[linkB].alias != markB {
		t.Fatalf("B's endpoint link %s carries alias %q, want B's mark %q", linkB, linksB[linkB].alias, markB)
	}
	if p := ns.ParentName(ns.MustLink(linkB)); p != "vp1" {
		t.Fatalf("B's endpoint on %s, want vp1", p)
	}
	ns.WantLinks(with(linkA, linkB)...)

	// kill -9 and start again, each in turn: both endpoint links stay.
	b.Restart()
	wantSame(t, ns, "B's restart", linksA)
	wantSame(t, ns, "B's restart", linksB)
	a.Restart()
	wantSame(t, ns, "A's restart", linksA)
	wantSame(t, ns, "A's restart", linksB)
	ns.WantLinks(with(linkA, linkB)...)
	if instanceMark(t, a) != markA || instanceMark(t, b) != markB {
		t.Fatal("a restart changed an instance's mark")
	}

	// Strays: links carrying A's mark that A's records do not know (one of
	// underlay's endpoint name form on B's parent, one of another name),
	// and links without a mark. B's restart deletes none of them; A's
	// deletes A's and only those.
	const strayA1, strayA2, unmarked, userLink = "ule0123456789ab", "straya", "ule00000000000f", "mine0"
	addMarkedMacvlan(t, ns, strayA1, "vp1", markA)
	addMarkedMacvlan(t, ns, strayA2, "vp0", markA)
	addMarkedMacvlan(t, ns, unmarked, "vp0", "")
	addMarkedMacvlan(t, ns, userLink, "vp1", "")
	strays := linkStates(t, ns, strayA1, strayA2)
	others := linkStates(t, ns, unmarked, userLink)
	all := with(linkA, linkB, strayA1, strayA2, unmarked, userLink)
	ns.WantLinks(all...)

	b.Restart()
	ns.WantLinks(all...)
	wantSame(t, ns, "B's restart with A's strays present", strays)
	wantSame(t, ns, "B's restart with A's strays present", others)
	wantSame(t, ns, "B's restart with A's strays present", linksA)
	wantSame(t, ns, "B's restart with A's strays present", linksB)
	if log := b.Log(); strings.Contains(log, strayA1) || strings.Contains(log, strayA2) {
		t.Fatalf("B's log mentions A's strays:\n%s", log)
	}

	a.Restart()
	ns.WantLinks(with(linkA, linkB, unmarked, userLink)...)
	wantSame(t, ns, "A's restart", linksA)
	wantSame(t, ns, "A's restart", linksB)
	wantSame(t, ns, "A's restart", others)
	for _, s := range []string{strayA1, strayA2} {
		if !strings.Contains(a.Log(), "link="+s) {
			t.Fatalf("A's log does not name the stray %s it deleted", s)
		}
	}

	// Both still serve their own networks, and each removes only its own.
	a.RemoveEndpoint(netA, epA)
	ns.WantLinks(with(linkB, unmarked, userLink)...)
	a.DeleteNetwork(netA)
	wantSame(t, ns, "A's delete", linksB)
	b.RemoveEndpoint(netB, epB)
	b.DeleteNetwork(netB)
	ns.WantLinks(with(unmarked, userLink)...)
	wantSame(t, ns, "the end", others)
	// CheckConsistent counts every link of the endpoint name form as one
	// of this daemon's: the unmarked one goes first.
	ns.Delete(unmarked)
	a.CheckConsistent().WantEmpty(t)
	b.CheckConsistent().WantEmpty(t)
}

// A link carrying B's mark under the name of one of A's endpoints is B's,
// whatever A's records say: A's start keeps it (another mark), and so do
// A's DeleteEndpoint and DeleteNetwork (logged), while B's start deletes it
// as a stray of B's (its mark, and no record of B's names it).
func TestInstancesOtherMarkNeverDeleted(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	ns.AddVeth("vp1", "vp1-peer", 9000)
	a := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	b := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	markA, markB := instanceMark(t, a), instanceMark(t, b)
	a.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	a.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	if got := ns.MustLink(linkA).Attrs().Alias; got != markA {
		t.Fatalf("A's endpoint link carries alias %q, want %q", got, markA)
	}

	// Behind A's back, its endpoint link is replaced by one carrying B's mark.
	a.Kill()
	ns.Delete(linkA)
	addMarkedMacvlan(t, ns, linkA, "vp0", markB)
	theirs := linkStates(t, ns, linkA)
	a.Start()
	wantSame(t, ns, "A's start", theirs)
	b.Restart() // B's records do not know it: still B's mark, so a stray for B
	if l := ns.Link(linkA); l != nil {
		t.Fatalf("B's start kept %s, which carries B's mark and no record of B's names", linkA)
	}
	addMarkedMacvlan(t, ns, linkA, "vp0", markB)
	theirs = linkStates(t, ns, linkA)
	a.RemoveEndpoint(netA, epA)
	a.DeleteNetwork(netA)
	wantSame(t, ns, "A's DeleteEndpoint and DeleteNetwork", theirs)
	if !strings.Contains(a.Log(), "not deleting a link underlay did not create here") {
		t.Fatal("A did not log why it left the link alone")
	}
	a.Kill()
	if s := a.ReadState(); len(s.Networks)+len(s.Endpoints) != 0 {
		t.Fatalf("A still stores networks %v and %d endpoints", s.NetworkIDs(), len(s.Endpoints))
	}
}

// A daemon whose socket answers is refused before its state is reconciled:
// started on B's state file with A's live socket, it exits naming the
// socket and leaves B's stray alone; B started on its own socket deletes
// it.
func TestInstancesSocketInUseRefusedBeforeReconcile(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	a := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	b := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir()})
	markB := instanceMark(t, b)
	b.Kill()
	const stray = "ule0123456789ab"
	addMarkedMacvlan(t, ns, stray, "vp0", markB)

	cmd := b.Command(nil, "serve", "--socket", a.Socket, "--state", b.State)
	out, err := cmd.CombinedOutput()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err == nil {
		t.Fatalf("a daemon on A's live socket exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), a.Socket) || !strings.Contains(string(out), "in use") {
		t.Fatalf("a daemon on A's live socket said %q, want a refusal naming %s", out, a.Socket)
	}
	if strings.Contains(string(out), "reconcile") || strings.Contains(string(out), stray) {
		t.Fatalf("the refused daemon reconciled before checking its socket:\n%s", out)
	}
	ns.WantLinks("lo", "vp0", "vp0-peer", stray)
	a.MustCall("GetCapabilities", nil, nil) // A still serves

	b.Start()
	ns.WantLinks("lo", "vp0", "vp0-peer")
}

// Two daemons started at once on one socket path, each with its own state
// file (so bbolt's lock on the state does not part them): exactly one
// serves, and the other exits 1 before reconciling anything, naming the
// socket and the serving daemon's PID. Ten rounds, each started once the
// previous round's server is gone, by SIGTERM (socket removed) or by
// kill -9 (socket and lock file left behind): the path is free again
// either way.
func TestInstancesTwoDaemonsAtOnceOnOneSocket(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	socket := filepath.Join(t.TempDir(), "underlay.sock")
	for round := range 10 {
		pair := []*itest.Daemon{
			itest.NewDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir(), Socket: socket}),
			itest.NewDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir(), Socket: socket}),
		}
		startAtOnce(t, pair...)
		var winner, loser *itest.Daemon
		select {
		case <-pair[0].Exited():
			winner, loser = pair[1], pair[0]
		case <-pair[1].Exited():
			winner, loser = pair[0], pair[1]
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: two daemons started at once on %s both still run after 15s: want the second refused", round, socket)
		}
		if err := winner.WaitReady(itest.ReadyWait()); err != nil {
			t.Fatalf("round %d: the daemon that was not refused does not serve: %v", round, err)
		}
		if code := loser.ProcessState().ExitCode(); code != 1 {
			t.Fatalf("round %d: the refused daemon exited with %d, want 1:\n%s", round, code, loser.Log())
		}
		out := loser.Log()
		if want := fmt.Sprintf("pid %d", winner.Pid()); !strings.Contains(out, socket) || !strings.Contains(out, want) {
			t.Fatalf("round %d: the refused daemon said:\n%s\nwant an error naming %s and the serving daemon (%s)", round, out, socket, want)
		}
		if strings.Contains(out, "state restored") {
			t.Fatalf("round %d: the refused daemon reconciled its state before it was refused:\n%s", round, out)
		}
		select {
		case <-winner.Exited():
			t.Fatalf("round %d: the serving daemon exited (%v):\n%s", round, winner.ProcessState(), winner.Log())
		default:
		}
		if round%2 == 0 {
			if err := winner.Stop(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		} else {
			winner.Kill()
		}
	}
	// The last round's server was killed with -9: one daemon alone takes
	// the path.
	itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: t.TempDir(), Socket: socket})
}

// startAtOnce starts the daemons from goroutines released together,
// without waiting for their sockets.
func startAtOnce(t *testing.T, ds ...*itest.Daemon) {
	t.Helper()
	release := make(chan struct{})
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() {
			<-release
			errs[i] = d.StartNoWait()
		})
	}
	close(release)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
