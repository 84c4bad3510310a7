package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// records stops the daemon with SIGTERM, reads its state file and starts
// it again: it returns the stored network IDs and endpoint count.
func records(t *testing.T, d *itest.Daemon) (nets []string, endpoints int) {
	t.Helper()
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error {
			if n.Pending != nil {
				return fmt.Errorf("network %s still pending", n.ID)
			}
			nets = append(nets, n.ID)
			eps, err := tx.Endpoints(n.ID)
			endpoints += len(eps)
			return err
		})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(nets)
	d.Start()
	return nets, endpoints
}

func wantRecords(t *testing.T, d *itest.Daemon, endpoints int, ids ...string) {
	t.Helper()
	sort.Strings(ids)
	got, eps := records(t, d)
	if fmt.Sprint(got) != fmt.Sprint(ids) || eps != endpoints {
		t.Fatalf("stored networks %v with %d endpoints, want %v with %d", got, eps, ids, endpoints)
	}
}

func TestRule1SameIDIsReused(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	n := itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}}
	d.MustCreateNetwork(n)
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	for i := 0; i < 3; i++ {
		if msg := d.CreateNetwork(n); msg != "" {
			t.Fatalf("same-ID CreateNetwork %d answered %q, want {}", i, msg)
		}
	}
	ns.WantLinks(with(linkA)...)
	wantRecords(t, d, 1, netA)
}

func TestRule2StaleDuplicateReplaced(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	ns.WantLinks(with(linkA)...)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp1", "macvlan_mode": "private"}, V4: []string{"198.18.7.0/24"}})
	ns.WantLinks(base...) // the stale copy's endpoint link is gone
	if !strings.Contains(d.Log(), "replacing stale duplicate") {
		t.Fatal("the replacement was not logged")
	}
	// The new network works on its new parent.
	d.Endpoint(netA, epB, "198.18.7.10/24", "", "")
	if p := ns.ParentName(ns.MustLink(linkB)); p != "vp1" {
		t.Fatalf("new endpoint on %s, want vp1", p)
	}
	wantRecords(t, d, 1, netA)
}

func TestRule3ConflictsRefusedNamingHolder(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	for _, tc := range []struct {
		opts   map[string]string
		subnet string
		reason string
	}{
		{map[string]string{"parent": "vp0"}, "198.18.1.128/25", "overlaps"},
		{map[string]string{"parent": "vp0", "macvlan_mode": "passthru"}, "198.18.2.0/24", "exclusively"},
		{map[string]string{"parent": "vp0", "type": "ipvlan"}, "198.18.3.0/24", "EBUSY"},
	} {
		msg := d.CreateNetwork(itest.Net{ID: netB, Opts: tc.opts, V4: []string{tc.subnet}})
		for _, want := range []string{"aaaaaaaaaaaa", "vp0", tc.reason, "docker network rm aaaaaaaaaaaa"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("conflicting create (%v) answered %q, want it to mention %q", tc.opts, msg, want)
			}
		}
	}
	// Compatible networks coexist on the parent.
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0", "macvlan_mode": "private"}, V4: []string{"198.18.2.0/24"}, V6: []string{"2001:db8:2::/64"}})
	d.Endpoint(netB, epB, "198.18.2.10/24", "2001:db8:2::10/64", "")
	ns.WantLinks(with(linkA, linkB)...)
	wantRecords(t, d, 2, netA, netB)
}

func TestRule4StaleHolder(t *testing.T) {
	// Serial: the holder must still be younger than the 3 s grace when the create is sent.
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	sentA := time.Now() // the holder's record is created after this
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "macvlan_mode": "passthru"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")

	// Docker still knows the holder: refused.
	docker.SetLive(netA)
	if msg := d.CreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.2.0/24"}}); !strings.Contains(msg, "docker network rm aaaaaaaaaaaa") {
		t.Fatalf("create against a live holder answered %q", msg)
	}
	ns.WantLinks(with(linkA)...)
	// Removed while the plugin could not see it: Docker answers its own
	// 404. The holder is younger than the grace period (3 s), so it may be
	// a network libnetwork has not stored yet: it is asked about again once
	// it is 3 s old, still 404, and only then removed.
	docker.SetLive()
	calls := docker.Calls()
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.2.0/24"}})
	if age := time.Since(sentA); age < 3*time.Second {
		t.Fatalf("the young stale holder was removed %s after its create was sent: want it asked again once 3 s old", age)
	}
	if n := docker.Calls() - calls; n != 2 {
		t.Fatalf("Docker was asked %d times about the young holder, want 2 (once, and again after the grace period)", n)
	}
	ns.WantLinks(base...)
	if !strings.Contains(d.Log(), "removing stale holder") {
		t.Fatal("the stale holder's removal was not logged")
	}
	wantRecords(t, d, 0, netB)
}

func TestRule4DockerUnreachableRefuses(t *testing.T) {
	t.Parallel()
	_, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", "unix:///nonexistent/docker.sock"}})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	if msg := d.CreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}); !strings.Contains(msg, "aaaaaaaaaaaa") {
		t.Fatalf("create with Docker unreachable answered %q, want a refusal naming the holder", msg)
	}
	wantRecords(t, d, 0, netA)
}

func TestRule5RaceOnOneParent(t *testing.T) {
	t.Parallel()
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	const n = 64
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, fmt.Sprintf("%012x%052d", i+1, 0))
	}
	docker.SetLive(ids...)
	msgs := itest.Concurrently(n, func(i int) string {
		return d.CreateNetwork(itest.Net{ID: ids[i], Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	})
	winner := -1
	for i, msg := range msgs {
		switch {
		case msg == "" && winner >= 0:
			t.Fatalf("two winners: %d and %d", winner, i)
		case msg == "":
			winner = i
		case !strings.Contains(msg, "already used by network"):
			t.Fatalf("loser %d answered %q, want the conflict error", i, msg)
		}
	}
	if winner < 0 {
		t.Fatal("no winner")
	}
	for i, msg := range msgs {
		if i != winner && !strings.Contains(msg, ids[winner][:12]) {
			t.Fatalf("loser %d answered %q, want it to name the winner %s", i, msg, ids[winner][:12])
		}
	}
	ns.WantLinks(base...)
	wantRecords(t, d, 0, ids[winner])
}

func TestRule5SameIDConcurrently(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	msgs := itest.Concurrently(64, func(int) string {
		return d.CreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	})
	for i, msg := range msgs {
		if msg != "" {
			t.Fatalf("same-ID create %d answered %q, want {}", i, msg)
		}
	}
	ns.WantLinks(base...)
	wantRecords(t, d, 0, netA)
}

func TestRule6FailedCreateLeavesNothing(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	// Kernel-level failures: a parent that is not there, an MTU it refuses.
	for _, n := range []itest.Net{
		{ID: netA, Opts: map[string]string{"parent": "missing0"}, V4: []string{"198.18.1.0/24"}},
		{ID: netA, Opts: map[string]string{"parent": "vp0", "mtu": "1600"}, V4: []string{"198.18.1.0/24"}},
		{ID: netA, Opts: map[string]string{"parent": "vp0.10"}, V4: []string{"198.18.1.0/24"}}, // no 8021q on this kernel, or created: either way consistent
	} {
		if msg := d.CreateNetwork(n); msg == "" {
			d.DeleteNetwork(n.ID)
		}
		ns.WantLinks(base...)
	}
	wantRecords(t, d, 0)
}
