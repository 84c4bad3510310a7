package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The operator's view and repairs over the fake kernel and a real state
// file, wired as the driver wires them.

// docker answers whether a network exists: live ones do; err, when set,
// is its answer to everything.
type docker struct {
	live map[string]bool
	err  error
}

func (d *docker) NetworkExists(_ context.Context, id string) (bool, error) {
	return d.live[id], d.err
}

type opFixture struct {
	*fixture
	docker *docker
	o      *reconcile.Operator
}

// newOpFixture is newFixture's kernel, state file and executor with the
// operator of the same instance.
func newOpFixture(t *testing.T) *opFixture {
	t.Helper()
	f := &opFixture{fixture: newFixture(t), docker: &docker{live: map[string]bool{}}}
	f.o = &reconcile.Operator{Kernel: f.k, Store: f.db, Locks: f.locks, Docker: f.docker, Reconcile: f.x, Owned: f.x.Owned, Joins: f.x.Joins,
		Events: f.ev, Mark: mark, Boot: "boot-1",
		Grace: 3 * time.Second, Window: time.Minute, Log: slog.New(slog.DiscardHandler), Now: f.clock.Now}
	return f
}

// recorded says whether the state file holds network id.
func (f *opFixture) recorded(t *testing.T, id string) bool {
	t.Helper()
	n, err := store.ReadNetwork(f.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return n != nil
}

// wantRefused fails t unless err is a conflict (409) naming every
// substring.
func wantRefused(t *testing.T, err error, substrings ...string) {
	t.Helper()
	drivertest.WantErr(t, err, pluginapi.ErrConflict, substrings...)
}

// The inventory (underlay ls, underlay doctor) holds the state file's
// networks with their endpoints (joins kept in memory included), the owned
// parents and their use, the kernel's links, the host links of networks
// with a host address and their addresses, and this instance's identity.
func TestInventory(t *testing.T) {
	ctx := context.Background()
	f := newOpFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10))
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	withHost := drivertest.Macvlan(drivertest.NetB, "eth1", "bridge", "198.18.2.0/24")
	withHost.HostAddress = "198.18.2.5"
	netA := onParent(drivertest.NetA, "eth0.10")
	epA := record.Endpoint{NetworkID: drivertest.NetA, ID: drivertest.EpA, Link: config.EndpointLinkName(drivertest.EpA), IPv4: "198.18.1.10/24"}
	epB := record.Endpoint{NetworkID: drivertest.NetB, ID: drivertest.EpB, Link: config.EndpointLinkName(drivertest.EpB), IPv4: "198.18.2.10/24"}
	drivertest.Put(t, f.db, []record.Network{netA, withHost, onParent(drivertest.NetC, "eth0.10")}, epA, epB)
	// A join of a network without a host address is kept in memory only.
	if commit := f.x.Joins.Join(netA, epA, "/var/run/docker/netns/abc", "boot-1"); commit != nil {
		t.Fatal("a join of a network without a host address is committed")
	}
	shim := config.ShimName(drivertest.NetB)
	if err := f.k.AddShim(ctx, kernel.Endpoint{Name: shim, Parent: "eth1", Type: "macvlan", Mode: "bridge", Mark: mark}, netip.MustParseAddr("198.18.2.5")); err != nil {
		t.Fatal(err)
	}

	inv, err := f.o.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range inv.Networks {
		ids = append(ids, n.ID)
	}
	if want := []string{drivertest.NetA, drivertest.NetB, drivertest.NetC}; !slices.Equal(ids, want) {
		t.Errorf("networks %v, want %v", ids, want)
	}
	if len(inv.Endpoints) != 2 || inv.Endpoints[0].ID != drivertest.EpA || inv.Endpoints[1].ID != drivertest.EpB {
		t.Fatalf("endpoints %+v, want A and B", inv.Endpoints)
	}
	if ep := inv.Endpoints[0]; ep.Sandbox != "/var/run/docker/netns/abc" || ep.Boot != "boot-1" {
		t.Errorf("endpoint A's join = %q in %q, want the join kept in memory", ep.Sandbox, ep.Boot)
	}
	if len(inv.Owned) != 1 || inv.Owned[0] != vlan("eth0.10", "eth0", 10) {
		t.Errorf("owned %+v, want eth0.10", inv.Owned)
	}
	if inv.Use["eth0.10"] != 2 || inv.Use["eth1"] != 1 {
		t.Errorf("use %v, want eth0.10: 2, eth1: 1", inv.Use)
	}
	var names []string
	for _, l := range inv.Links {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if want := f.k.Names(); !slices.Equal(names, want) {
		t.Errorf("links %v, want the kernel's %v", names, want)
	}
	if len(inv.HostLinks) != 1 || inv.HostLinks[drivertest.NetB] != shim {
		t.Errorf("host links %v, want B's %s", inv.HostLinks, shim)
	}
	if as := inv.HostLinkAddrs[shim]; len(as) != 1 || as[0] != netip.MustParseAddr("198.18.2.5") {
		t.Errorf("host link addresses %v, want 198.18.2.5 on %s", inv.HostLinkAddrs, shim)
	}
	if inv.Mark != mark || inv.Boot != "boot-1" || inv.Grace != 3*time.Second || inv.PoolGrace != time.Minute || !inv.Now.Equal(f.clock.Now()) {
		t.Errorf("identity: mark %q, boot %q, grace %s, pool grace %s, now %s", inv.Mark, inv.Boot, inv.Grace, inv.PoolGrace, inv.Now)
	}
}

// The inventory names what it could not read.
func TestInventoryFails(t *testing.T) {
	f := newOpFixture(t)
	f.k.SetFault(func(op, _ string) error {
		if op == "list" {
			return errors.New("netlink: message truncated")
		}
		return nil
	})
	if _, err := f.o.Inventory(context.Background()); err == nil || !strings.Contains(err.Error(), "message truncated") {
		t.Errorf("Inventory with the kernel failing = %v", err)
	}
	f.k.SetFault(nil)
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := f.o.Inventory(context.Background())
	drivertest.WantErr(t, err, nil, "read the state file")
}

// RemoveStaleNetwork removes a network only when it is past the grace
// period and Docker answers it has no such network.
func TestRemoveStaleNetwork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		net     func(f *opFixture) *record.Network // nil: no record
		age     time.Duration
		setup   func(f *opFixture)
		want    string // the answer; "" when refused
		refused []string
	}{
		{name: "stale", age: time.Minute, want: "removed network aaaaaaaaaaaa and its links from eth0"},
		{name: "gone", net: func(*opFixture) *record.Network { return nil }, want: "no longer needed: the network is gone"},
		{name: "within the grace period", age: time.Second, refused: []string{"network aaaaaaaaaaaa was created 1s ago", "within the 3s"}},
		{name: "Docker knows it", age: time.Minute, setup: func(f *opFixture) { f.docker.live[drivertest.NetA] = true },
			refused: []string{"network aaaaaaaaaaaa not removed", "Docker knows it"}},
		{name: "Docker cannot tell", age: time.Minute, setup: func(f *opFixture) { f.docker.err = errors.New("connection refused") },
			refused: []string{"could not confirm it is stale", "connection refused"}},
		{name: "no Docker", age: time.Minute, setup: func(f *opFixture) { f.o.Docker = nil }, refused: []string{"no Docker API", "--docker-host"}},
		{name: "pending", age: time.Minute, net: func(f *opFixture) *record.Network {
			n := onParent(drivertest.NetA, "eth0")
			n.Pending = &record.Reservation{Token: "t", Deadline: f.clock.Now().Add(time.Hour)}
			return &n
		}, refused: []string{"network aaaaaaaaaaaa is being created"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpFixture(t)
			n := onParent(drivertest.NetA, "eth0")
			n.Created = f.clock.Now()
			rec := &n
			if tc.net != nil {
				rec = tc.net(f)
			}
			if rec != nil {
				drivertest.Put(t, f.db, []record.Network{*rec})
			}
			f.clock.Advance(tc.age)
			if tc.setup != nil {
				tc.setup(f)
			}
			got, err := f.o.RemoveStaleNetwork(context.Background(), drivertest.NetA)
			if tc.refused != nil {
				wantRefused(t, err, tc.refused...)
				if rec != nil && !f.recorded(t, drivertest.NetA) {
					t.Errorf("network %s removed", drivertest.NetA)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("RemoveStaleNetwork = %q, %v; want %q", got, err, tc.want)
			}
			counted := 0 // the removals counted
			if rec != nil {
				counted = 1
			}
			if f.recorded(t, drivertest.NetA) || f.ev.stale != counted {
				t.Errorf("network %s still recorded %v, counted %d removals", drivertest.NetA, f.recorded(t, drivertest.NetA), f.ev.stale)
			}
		})
	}
}

// RecreateParent makes a missing owned parent a network needs, and only
// that.
func TestRecreateParent(t *testing.T) {
	for _, tc := range []struct {
		name, link string
		setup      func(t *testing.T, f *opFixture)
		want       string
		wantErr    string
		made       bool
	}{
		{name: "missing and needed", link: "eth0.10", want: "re-created eth0.10", made: true,
			setup: func(t *testing.T, f *opFixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			}},
		{name: "there", link: "eth0.10", want: "no longer needed: it is there", made: true,
			setup: func(t *testing.T, f *opFixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			}},
		{name: "not needed", link: "eth0.10", want: "no longer needed: no network needs an owned link eth0.10",
			setup: func(t *testing.T, f *opFixture) { f.putParent(t, vlan("eth0.10", "eth0", 10)) }},
		{name: "not owned", link: "eth0.10", want: "no longer needed: no network needs an owned link eth0.10",
			setup: func(t *testing.T, f *opFixture) {
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			}},
		{name: "its base missing", link: "eth7.10", wantErr: "parent link eth7.10 could not be re-created now",
			setup: func(t *testing.T, f *opFixture) {
				f.putParent(t, vlan("eth7.10", "eth7", 10))
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth7.10")})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpFixture(t)
			tc.setup(t, f)
			got, err := f.o.RecreateParent(context.Background(), tc.link)
			if tc.wantErr != "" {
				drivertest.WantErr(t, err, nil, tc.wantErr)
			} else if err != nil || got != tc.want {
				t.Fatalf("RecreateParent = %q, %v; want %q", got, err, tc.want)
			}
			if l, ok := f.k.Link(tc.link); ok != tc.made || (ok && (l.Alias != mark || l.VLAN != 10)) {
				t.Errorf("link %s = %+v, %v; want there: %v, with the mark", tc.link, l, ok, tc.made)
			}
		})
	}
}

// DeleteOrphanLink deletes a link with this instance's mark no record
// owns, and refuses every other.
func TestDeleteOrphanLink(t *testing.T) {
	ep := config.EndpointLinkName(drivertest.EpA)
	for _, tc := range []struct {
		name, link string
		setup      func(t *testing.T, f *opFixture)
		want       string   // the answer when not refused
		refused    []string // the refusal's words
		deleted    bool
	}{
		{name: "an orphan", link: "uleffffffffffff", want: "deleted uleffffffffffff", deleted: true,
			setup: func(t *testing.T, f *opFixture) {
				f.k.AddLink(kernel.Link{Name: "uleffffffffffff", Kind: "macvlan", Alias: mark})
			}},
		{name: "gone", link: "uleffffffffffff", want: "no longer needed: the link is gone"},
		{name: "another instance's mark", link: "uleffffffffffff",
			refused: []string{"link uleffffffffffff does not carry this underlay's mark", mark},
			setup: func(t *testing.T, f *opFixture) {
				f.k.AddLink(kernel.Link{Name: "uleffffffffffff", Kind: "macvlan", Alias: otherMark})
			}},
		{name: "no mark", link: "eth0.10", refused: []string{"does not carry this underlay's mark"},
			setup: func(t *testing.T, f *opFixture) { f.addVLAN(t, "eth0.10", "eth0", 10, "") }},
		{name: "a recorded endpoint link", link: ep, want: "no longer needed: a record owns link " + ep + " now",
			setup: func(t *testing.T, f *opFixture) {
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0")},
					record.Endpoint{NetworkID: drivertest.NetA, ID: drivertest.EpA, Link: ep})
				f.k.AddLink(kernel.Link{Name: ep, Kind: "macvlan", Alias: mark})
			}},
		{name: "an owned VLAN renamed", link: "mine", refused: []string{"link mine is the VLAN eth0.10 that underlay created, renamed", "its record follows it"},
			setup: func(t *testing.T, f *opFixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
				f.addVLAN(t, "mine", "eth0", 10, mark)
			}},
		{name: "links stand on it", link: "eth0.10", refused: []string{"links stand on eth0.10", "uluser"},
			setup: func(t *testing.T, f *opFixture) {
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
				f.addVLAN(t, "uluser", "eth0.10", 5, "")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpFixture(t)
			if tc.setup != nil {
				tc.setup(t, f)
			}
			_, there := f.k.Link(tc.link)
			got, err := f.o.DeleteOrphanLink(context.Background(), tc.link)
			if tc.refused != nil {
				wantRefused(t, err, tc.refused...)
			} else if err != nil || got != tc.want {
				t.Fatalf("DeleteOrphanLink = %q, %v; want %q", got, err, tc.want)
			}
			if _, ok := f.k.Link(tc.link); ok != (there && !tc.deleted) {
				t.Errorf("link %s there afterwards: %v, before: %v, want deleted: %v", tc.link, ok, there, tc.deleted)
			}
		})
	}
}

// DeleteOrphanLink waits for the lock a request holds on the link.
func TestDeleteOrphanLinkWaitsForTheLock(t *testing.T) {
	f := newOpFixture(t)
	f.k.AddLink(kernel.Link{Name: "uleffffffffffff", Kind: "macvlan", Alias: mark})
	_, unlock, err := f.locks.Acquire(context.Background(), keylock.Exclusive(keylock.ParentKey("uleffffffffffff")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := f.o.DeleteOrphanLink(ctx, "uleffffffffffff"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DeleteOrphanLink with the lock taken = %v, want it to wait until the context ends", err)
	}
	if _, ok := f.k.Link("uleffffffffffff"); !ok {
		t.Fatal("deleted while locked")
	}
	unlock()
}

// RollbackExpired drops a reservation past its deadline only.
func TestRollbackExpired(t *testing.T) {
	ctx := context.Background()
	f := newOpFixture(t)
	n := onParent(drivertest.NetA, "eth0.10")
	n.Pending = &record.Reservation{Token: "t", Deadline: f.clock.Now().Add(time.Second)}
	drivertest.Put(t, f.db, []record.Network{n, onParent(drivertest.NetB, "eth1")})
	_, err := f.o.RollbackExpired(ctx, drivertest.NetA)
	wantRefused(t, err, "the reservation of network aaaaaaaaaaaa has not expired", "2026-01-01T00:00:01Z")
	if got, err := f.o.RollbackExpired(ctx, drivertest.NetB); err != nil || got != "no longer needed: the network is no longer pending" {
		t.Errorf("RollbackExpired of a committed network = %q, %v", got, err)
	}
	f.clock.Advance(2 * time.Second)
	got, err := f.o.RollbackExpired(ctx, drivertest.NetA)
	if err != nil || got != "rolled back network aaaaaaaaaaaa (the janitor releases its parent eth0.10 when nothing needs it)" {
		t.Fatalf("RollbackExpired = %q, %v", got, err)
	}
	if rec, _ := store.ReadNetwork(f.db, drivertest.NetA); rec != nil {
		t.Errorf("the record stays: %+v", rec)
	}
	if rec, _ := store.ReadNetwork(f.db, drivertest.NetB); rec == nil {
		t.Error("the other network went")
	}
	if f.ev.rolledBack != 1 {
		t.Errorf("%d rollbacks counted, want 1", f.ev.rolledBack)
	}
}

// HealLink puts one owned link back in order (up, its MTU), follows an
// owned VLAN renamed, and says when there is nothing to do or a request
// holds the link.
func TestHealLink(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) *opFixture {
		f := newOpFixture(t)
		f.putParent(t, vlan("eth0.10", "eth0", 10))
		f.addVLAN(t, "eth0.10", "eth0", 10, mark)
		drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
		return f
	}
	t.Run("healthy", func(t *testing.T) {
		f := setup(t)
		if got, err := f.o.HealLink(ctx, "eth0.10"); err != nil || got != "no longer needed: link eth0.10 is healthy or not underlay's to heal" {
			t.Errorf("HealLink = %q, %v", got, err)
		}
	})
	t.Run("down", func(t *testing.T) {
		f := setup(t)
		f.k.SetDown("eth0.10", true)
		f.k.SetDown("eth1", true) // not underlay's: not healed
		got, err := f.o.HealLink(ctx, "eth0.10")
		if err != nil || !strings.HasPrefix(got, "healed eth0.10 (heal eth0.10") {
			t.Fatalf("HealLink = %q, %v", got, err)
		}
		if l, _ := f.k.Link("eth0.10"); l.Down {
			t.Error("eth0.10 still down")
		}
		if l, _ := f.k.Link("eth1"); !l.Down {
			t.Error("eth1, not underlay's, was set up")
		}
		if !slices.Equal(f.ev.repair, []string{"heal"}) {
			t.Errorf("repairs counted %v", f.ev.repair)
		}
		if got, _ := f.o.HealLink(ctx, "eth1"); !strings.HasPrefix(got, "no longer needed") {
			t.Errorf("HealLink(eth1) = %q", got)
		}
	})
	t.Run("renamed", func(t *testing.T) {
		f := setup(t)
		if err := f.k.Rename("eth0.10", "mine"); err != nil {
			t.Fatal(err)
		}
		got, err := f.o.HealLink(ctx, "mine")
		if err != nil || got != "healed mine (follow eth0.10->mine)" {
			t.Fatalf("HealLink = %q, %v", got, err)
		}
		if ps := f.parents(t); !slices.Equal(ps, []string{"mine"}) {
			t.Errorf("owned %v, want mine", ps)
		}
		if rec, _ := store.ReadNetwork(f.db, drivertest.NetA); rec == nil || rec.Parent != "mine" {
			t.Errorf("network = %+v, want on mine", rec)
		}
	})
	t.Run("held by a request", func(t *testing.T) {
		f := setup(t)
		f.k.SetDown("eth0.10", true)
		unlock, _ := f.locks.TryExclusive(keylock.ParentKey("eth0.10"))
		defer unlock()
		_, err := f.o.HealLink(ctx, "eth0.10")
		wantRefused(t, err, "link eth0.10 is in use by a request: try again")
		if l, _ := f.k.Link("eth0.10"); !l.Down {
			t.Error("healed under a request's lock")
		}
	})
	t.Run("the kernel refuses", func(t *testing.T) {
		f := setup(t)
		f.k.SetDown("eth0.10", true)
		f.k.SetFault(func(op, _ string) error {
			if op == "heal" {
				return errors.New("operation not permitted")
			}
			return nil
		})
		_, err := f.o.HealLink(ctx, "eth0.10")
		drivertest.WantErr(t, err, nil, "could not heal link eth0.10", "daemon's log")
	})
}
