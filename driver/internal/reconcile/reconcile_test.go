package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/joins"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The executor over the fake kernel and a real state file, wired as the
// driver wires it.

var mark = kernel.Mark("reconcile-test")

const otherMark = "underlay:someone-else"

// events records what the executor tells.
type events struct {
	mu                sync.Mutex
	stale, rolledBack int
	reconcile, repair []string
}

func (e *events) StaleRemoved()                { e.mu.Lock(); e.stale++; e.mu.Unlock() }
func (e *events) ConflictRefused()             {}
func (e *events) ReservationRolledBack(string) { e.mu.Lock(); e.rolledBack++; e.mu.Unlock() }
func (e *events) ReconcileAction(op string) {
	e.mu.Lock()
	e.reconcile = append(e.reconcile, op)
	e.mu.Unlock()
}
func (e *events) RepairAction(op string) { e.mu.Lock(); e.repair = append(e.repair, op); e.mu.Unlock() }
func (e *events) ContainerRepair(string) {}

type fixture struct {
	k     *nltest.Kernel
	db    *store.DB
	locks *keylock.Locker
	clock *fakeclock.Clock
	ev    *events
	x     *reconcile.Executor
}

// newFixture is a kernel with eth0 and eth1, an empty state file and the
// executor of the instance with mark.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	k := nltest.New()
	k.AddHostLink("eth0", "device", 1500)
	k.AddHostLink("eth1", "device", 9000)
	f := &fixture{k: k, db: drivertest.Store(t), locks: keylock.New(), ev: &events{},
		clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	log := slog.New(slog.DiscardHandler)
	deleting := &links.SelfDeletions{}
	parents := &links.Maker{Links: k, Mark: mark}
	o := &links.Owned{Kernel: k, Store: f.db, Locks: f.locks, Parents: parents, Resolver: &links.Resolver{Links: k},
		Mark: mark, Blocks: k, Log: log, Now: f.clock.Now, Deleting: deleting}
	f.x = &reconcile.Executor{Kernel: k, Store: f.db, Owned: o, Parents: parents,
		Shims: &links.Shims{Links: k, Mark: mark, Log: log, DeleteOwned: o.Delete}, Joins: joins.NewTable(),
		Mark: mark, Boot: "boot-1", Log: log, Now: f.clock.Now, Events: f.ev, Deleting: deleting}
	return f
}

func (f *fixture) addVLAN(t *testing.T, name, base string, id int, mark string) {
	t.Helper()
	if err := f.k.AddVLAN(context.Background(), name, base, id, 0, mark); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) putParent(t *testing.T, ps ...record.ParentLink) {
	t.Helper()
	if err := f.db.Update(func(tx *store.Tx) error {
		for _, p := range ps {
			if err := tx.PutParentLink(p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// parents are the names of the owned parent links the state file records.
func (f *fixture) parents(t *testing.T) []string {
	t.Helper()
	var out []string
	if err := f.db.View(func(tx *store.Tx) error {
		ps, err := tx.ParentLinks()
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// networks are the IDs of the network records.
func (f *fixture) networks(t *testing.T) []string {
	t.Helper()
	var out []string
	if err := f.db.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error { out = append(out, n.ID); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) wantLinks(t *testing.T, names ...string) {
	t.Helper()
	want := append([]string{"eth0", "eth1", "lo"}, names...)
	slices.Sort(want)
	if got := f.k.Names(); !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

func (f *fixture) wantParents(t *testing.T, names ...string) {
	t.Helper()
	if got := f.parents(t); !slices.Equal(got, names) {
		t.Errorf("owned parent records %v, want %v", got, names)
	}
}

func vlan(name, base string, id int) record.ParentLink {
	return record.ParentLink{Name: name, Kind: kernel.KindVLAN, Base: base, VLAN: id}
}

func onParent(id, parent string) record.Network {
	n := drivertest.Macvlan(id, parent, "bridge", "198.18.1.0/24")
	n.Options = map[string]string{config.OptParent: parent}
	return n
}

func pending(n record.Network, token string, deadline time.Time) record.Network {
	n.Pending = &record.Reservation{Token: token, Deadline: deadline}
	return n
}

// Execute carries out each kind of step, re-checking the store under the
// parent's lock: a needed owned parent is made with the mark, an unneeded
// one deleted and forgotten, only links with the mark are deleted as
// strays, and a step the store no longer calls for does nothing.
func TestExecuteSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, f *fixture)
		step    plan.Step
		links   []string // besides eth0, eth1, lo
		parents []string
		nets    []string
	}{
		{
			name: "recreate a needed owned VLAN",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			},
			step:  plan.Step{Op: plan.OpRecreate, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			links: []string{"eth0.10"}, parents: []string{"eth0.10"}, nets: []string{drivertest.NetA},
		},
		{
			name:    "recreate an owned VLAN no network needs any more",
			setup:   func(t *testing.T, f *fixture) { f.putParent(t, vlan("eth0.10", "eth0", 10)) },
			step:    plan.Step{Op: plan.OpRecreate, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			parents: []string{"eth0.10"},
		},
		{
			name: "release an unneeded owned VLAN",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
			},
			step: plan.Step{Op: plan.OpRelease, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
		},
		{
			name: "release an owned VLAN a network needs again",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			},
			step:  plan.Step{Op: plan.OpRelease, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			links: []string{"eth0.10"}, parents: []string{"eth0.10"}, nets: []string{drivertest.NetA},
		},
		{
			name: "release an owned VLAN that now carries another mark",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, otherMark)
			},
			step:  plan.Step{Op: plan.OpRelease, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			links: []string{"eth0.10"},
		},
		{
			name: "forget an owned VLAN",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
			},
			step:  plan.Step{Op: plan.OpForget, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			links: []string{"eth0.10"},
		},
		{
			name:  "delete a stray with the mark",
			setup: func(t *testing.T, f *fixture) { f.addVLAN(t, "eth0.10", "eth0", 10, mark) },
			step:  plan.Step{Op: plan.OpDeleteStray, Name: "eth0.10"},
		},
		{
			name:  "delete a stray without a mark",
			setup: func(t *testing.T, f *fixture) { f.addVLAN(t, "eth0.10", "eth0", 10, "") },
			step:  plan.Step{Op: plan.OpDeleteStray, Name: "eth0.10"},
			links: []string{"eth0.10"},
		},
		{
			name:  "delete a stray with another instance's mark",
			setup: func(t *testing.T, f *fixture) { f.addVLAN(t, "eth0.10", "eth0", 10, otherMark) },
			step:  plan.Step{Op: plan.OpDeleteStray, Name: "eth0.10"},
			links: []string{"eth0.10"},
		},
		{
			name: "keep",
			setup: func(t *testing.T, f *fixture) {
				f.putParent(t, vlan("eth0.10", "eth0", 10))
				f.addVLAN(t, "eth0.10", "eth0", 10, mark)
			},
			step:  plan.Step{Op: plan.OpKeep, Name: "eth0.10"},
			links: []string{"eth0.10"}, parents: []string{"eth0.10"},
		},
		{
			name: "roll back a pending network",
			setup: func(t *testing.T, f *fixture) {
				drivertest.Put(t, f.db, []record.Network{pending(onParent(drivertest.NetA, "eth0"), "t", f.clock.Now()), onParent(drivertest.NetB, "eth0")})
			},
			step: plan.Step{Op: plan.OpRollback, Name: drivertest.NetA},
			nets: []string{drivertest.NetB},
		},
		{
			name: "roll back a committed network",
			setup: func(t *testing.T, f *fixture) {
				drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0")})
			},
			step: plan.Step{Op: plan.OpRollback, Name: drivertest.NetA},
			nets: []string{drivertest.NetA},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			var done []string
			out, err := f.x.ExecuteCounted(context.Background(), []plan.Step{tc.step}, "", func(op string) { done = append(done, op) })
			if err != nil || out != (reconcile.Outcome{}) {
				t.Fatalf("Execute = %+v, %v", out, err)
			}
			if len(done) != 1 || done[0] != tc.step.Op.String() {
				t.Errorf("counted %v, want %s", done, tc.step.Op)
			}
			f.wantLinks(t, tc.links...)
			f.wantParents(t, tc.parents...)
			if got := f.networks(t); !slices.Equal(got, tc.nets) {
				t.Errorf("networks %v, want %v", got, tc.nets)
			}
			if l, ok := f.k.Link("eth0.10"); ok && tc.step.Op == plan.OpRecreate && (l.Alias != mark || l.VLAN != 10 || f.k.Parent("eth0.10") != "eth0") {
				t.Errorf("re-created %+v on %s, want VLAN 10 on eth0 with the mark", l, f.k.Parent("eth0.10"))
			}
		})
	}
}

// A step that fails (the kernel refuses the VLAN) is reported as Failed
// and the steps's other steps still run; a step whose parent lock a request
// holds is left, with the locked steps after it, and the steps is Busy.
func TestExecuteFailedAndBusySteps(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*fixture, []plan.Step) {
		f := newFixture(t)
		f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth1.20", "eth1", 20))
		f.addVLAN(t, "eth1.20", "eth1", 20, mark)
		f.addVLAN(t, "eth0.99", "eth0", 99, mark)
		drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
		return f, []plan.Step{
			{Op: plan.OpRecreate, Name: "eth0.10", Parent: vlan("eth0.10", "eth0", 10)},
			{Op: plan.OpRelease, Name: "eth1.20", Parent: vlan("eth1.20", "eth1", 20)},
			{Op: plan.OpDeleteStray, Name: "eth0.99"},
		}
	}
	t.Run("failed", func(t *testing.T) {
		f, steps := setup(t)
		f.k.SetFault(func(op, name string) error {
			if op == "vlan" {
				return errors.New("operation not permitted")
			}
			return nil
		})
		var done []string
		out, err := f.x.ExecuteCounted(ctx, steps, "", func(op string) { done = append(done, op) })
		if err != nil || !out.Failed || out.Busy {
			t.Fatalf("Execute = %+v, %v; want Failed, no error (the watcher tries again)", out, err)
		}
		if want := []string{"release", "delete-stray"}; !slices.Equal(done, want) {
			t.Errorf("counted %v, want %v (not the failed step)", done, want)
		}
		f.wantLinks(t)
		f.wantParents(t, "eth0.10")
	})
	t.Run("busy", func(t *testing.T) {
		f, steps := setup(t)
		unlock, _ := f.locks.TryExclusive(keylock.ParentKey("eth0.10"))
		defer unlock()
		out, err := f.x.Execute(ctx, steps, "")
		if err != nil || !out.Busy || out.Failed {
			t.Fatalf("Execute = %+v, %v; want Busy", out, err)
		}
		// The release waits behind the busy lock; the stray (no lock) goes.
		f.wantLinks(t, "eth1.20")
		f.wantParents(t, "eth0.10", "eth1.20")
	})
	t.Run("held by the caller", func(t *testing.T) {
		f, steps := setup(t)
		unlock, _ := f.locks.TryExclusive(keylock.ParentKey("eth0.10"))
		defer unlock()
		out, err := f.x.Execute(ctx, steps, "eth0.10")
		if err != nil || out != (reconcile.Outcome{}) {
			t.Fatalf("Execute = %+v, %v", out, err)
		}
		f.wantLinks(t, "eth0.10")
		f.wantParents(t, "eth0.10")
	})
	t.Run("the kernel refuses a delete", func(t *testing.T) {
		f, _ := setup(t)
		f.k.SetFault(func(op, name string) error {
			if op == "delete" {
				return errors.New("device or resource busy")
			}
			return nil
		})
		_, err := f.x.Execute(ctx, []plan.Step{{Op: plan.OpRelease, Name: "eth1.20", Parent: vlan("eth1.20", "eth1", 20)}}, "")
		drivertest.WantErr(t, err, nil, "delete parent link eth1.20", "device or resource busy")
		f.wantParents(t, "eth0.10", "eth1.20")
	})
}

// UndoCreate rolls a failed create back: the reservation goes, and the
// parent link the create made goes with it; one it did not make (someone
// else's link of that name) stays, only its ownership is dropped.
func TestUndoCreate(t *testing.T) {
	ctx := context.Background()
	p := vlan("eth0.10", "eth0", 10)
	t.Run("made by this create", func(t *testing.T) {
		f := newFixture(t)
		f.putParent(t, p)
		drivertest.Put(t, f.db, []record.Network{pending(onParent(drivertest.NetA, "eth0.10"), "tok", f.clock.Now().Add(time.Minute))})
		f.addVLAN(t, "eth0.10", "eth0", 10, mark)
		if err := f.x.UndoCreate(ctx, drivertest.NetA, "tok", &p, true); err != nil {
			t.Fatal(err)
		}
		f.wantLinks(t)
		f.wantParents(t)
		if got := f.networks(t); len(got) != 0 {
			t.Errorf("networks %v after UndoCreate", got)
		}
	})
	t.Run("made, the reservation already expired and rolled back", func(t *testing.T) {
		f := newFixture(t)
		f.addVLAN(t, "eth0.10", "eth0", 10, mark)
		if err := f.x.UndoCreate(ctx, drivertest.NetA, "tok", &p, true); err != nil {
			t.Fatal(err)
		}
		f.wantLinks(t)
		f.wantParents(t)
	})
	t.Run("not made by this create", func(t *testing.T) {
		f := newFixture(t)
		f.putParent(t, p)
		drivertest.Put(t, f.db, []record.Network{pending(onParent(drivertest.NetA, "eth0.10"), "tok", f.clock.Now().Add(time.Minute))})
		f.addVLAN(t, "eth0.10", "eth0", 10, "")
		if err := f.x.UndoCreate(ctx, drivertest.NetA, "tok", &p, false); err != nil {
			t.Fatal(err)
		}
		f.wantLinks(t, "eth0.10")
		f.wantParents(t)
		if got := f.networks(t); len(got) != 0 {
			t.Errorf("networks %v after UndoCreate", got)
		}
	})
	t.Run("another reservation now", func(t *testing.T) {
		f := newFixture(t)
		f.putParent(t, p)
		drivertest.Put(t, f.db, []record.Network{pending(onParent(drivertest.NetA, "eth0.10"), "newer", f.clock.Now().Add(time.Minute))})
		f.addVLAN(t, "eth0.10", "eth0", 10, mark)
		if err := f.x.UndoCreate(ctx, drivertest.NetA, "tok", &p, true); err != nil {
			t.Fatal(err)
		}
		f.wantLinks(t, "eth0.10")
		f.wantParents(t, "eth0.10")
		if got := f.networks(t); len(got) != 1 {
			t.Errorf("networks %v: the newer reservation was dropped", got)
		}
	})
}

// Restore puts a state file and the kernel in order before the socket is
// served: a missing owned parent (with its owned base) is made again, the
// pending reservations are rolled back and their parents released, the
// strays with this instance's mark are deleted, other links never.
func TestRestore(t *testing.T) {
	f := newFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth0.10.5", "eth0.10", 5), vlan("eth1.20", "eth1", 20))
	drivertest.Put(t, f.db, []record.Network{
		onParent(drivertest.NetA, "eth0.10.5"),
		pending(onParent(drivertest.NetB, "eth1.20"), "dead", f.clock.Now().Add(time.Hour)),
	})
	f.addVLAN(t, "eth1.20", "eth1", 20, mark)
	f.addVLAN(t, "eth0.99", "eth0", 99, mark)      // a stray of ours
	f.addVLAN(t, "eth0.98", "eth0", 98, "")        // the administrator's
	f.addVLAN(t, "eth0.97", "eth0", 97, otherMark) // another instance's
	if err := f.x.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wantLinks(t, "eth0.10", "eth0.10.5", "eth0.97", "eth0.98")
	for name, base := range map[string]string{"eth0.10": "eth0", "eth0.10.5": "eth0.10"} {
		if l, ok := f.k.Link(name); !ok || l.Alias != mark || f.k.Parent(name) != base {
			t.Errorf("link %s = %+v on %q, want made with the mark on %s", name, l, f.k.Parent(name), base)
		}
	}
	f.wantParents(t, "eth0.10", "eth0.10.5")
	if got := f.networks(t); !slices.Equal(got, []string{drivertest.NetA}) {
		t.Errorf("networks %v, want A only", got)
	}
	slices.Sort(f.ev.reconcile)
	if want := []string{"delete-stray", "recreate", "recreate", "release", "rollback"}; !slices.Equal(f.ev.reconcile, want) {
		t.Errorf("counted %v, want %v", f.ev.reconcile, want)
	}
	if f.ev.rolledBack != 1 {
		t.Errorf("%d reservations rolled back, want 1", f.ev.rolledBack)
	}
}

// Restore names what failed.
func TestRestoreFails(t *testing.T) {
	f := newFixture(t)
	f.k.SetFault(func(op, name string) error {
		if op == "list" {
			return errors.New("netlink: message truncated")
		}
		return nil
	})
	drivertest.WantErr(t, f.x.Restore(context.Background()), nil, "reconcile state with the kernel", "message truncated")
}

// The janitor rolls back the expired reservations only, then releases the
// owned parents nothing needs any more.
func TestJanitorTick(t *testing.T) {
	f := newFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth1.20", "eth1", 20))
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	f.addVLAN(t, "eth1.20", "eth1", 20, mark)
	drivertest.Put(t, f.db, []record.Network{
		pending(onParent(drivertest.NetA, "eth0.10"), "a", f.clock.Now().Add(time.Second)),
		pending(onParent(drivertest.NetB, "eth1.20"), "b", f.clock.Now().Add(time.Hour)),
	})
	f.x.JanitorTick(context.Background())
	f.wantLinks(t, "eth0.10", "eth1.20")
	f.clock.Advance(2 * time.Second)
	f.x.JanitorTick(context.Background())
	f.wantLinks(t, "eth1.20")
	f.wantParents(t, "eth1.20")
	if got := f.networks(t); !slices.Equal(got, []string{drivertest.NetB}) {
		t.Errorf("networks %v, want B (not expired)", got)
	}
}

// The watcher's filter: a repair pass for changes of owned links and for
// deletions underlay did not make, none for endpoint links or underlay's
// own deletions; while waiting for a base, only links that may be one.
func TestRelevant(t *testing.T) {
	f := newFixture(t)
	vlanLink := kernel.Link{Name: "eth0.10", Index: 40, Kind: kernel.KindVLAN, Alias: mark}
	ep := kernel.Link{Name: config.EndpointLinkName(drivertest.EpA), Index: 41, Kind: "macvlan", Alias: mark}
	shim := kernel.Link{Name: config.ShimName(drivertest.NetA), Index: 42, Kind: "macvlan", Alias: mark}
	user := kernel.Link{Name: "user0", Index: 43, Kind: "device"}
	foreign := kernel.Link{Name: "eth0.12", Index: 45, Kind: kernel.KindVLAN, Alias: otherMark}
	self := kernel.Link{Name: "eth0.11", Index: 44, Kind: kernel.KindVLAN, Alias: mark}
	f.x.Deleting.Add(44, time.Now())
	down := vlanLink
	down.Down = true
	unmarkedEp := ep
	unmarkedEp.Alias = ""
	unmarkedShim := shim
	unmarkedShim.Alias = ""
	for _, tc := range []struct {
		name    string
		ev      netlinkutil.LinkEvent
		waiting bool
		want    bool
	}{
		{"an owned VLAN deleted by someone", netlinkutil.LinkEvent{Deleted: true, Link: vlanLink}, false, true},
		{"an owned link underlay deleted itself", netlinkutil.LinkEvent{Deleted: true, Link: self}, false, false},
		{"another instance's VLAN deleted", netlinkutil.LinkEvent{Deleted: true, Link: foreign}, false, false},
		{"an endpoint link deleted", netlinkutil.LinkEvent{Deleted: true, Link: ep}, false, false},
		{"an owned VLAN set down or renamed", netlinkutil.LinkEvent{Link: down}, false, true},
		{"a host link's address removed", netlinkutil.LinkEvent{AddrRemoved: true, Link: shim}, false, true},
		{"an address removed from a user's link", netlinkutil.LinkEvent{AddrRemoved: true, Link: user}, true, false},
		{"a user's link deleted", netlinkutil.LinkEvent{Deleted: true, Link: user}, true, false},
		{"a new user link while waiting for a base", netlinkutil.LinkEvent{Link: user}, true, true},
		{"a new user link when not waiting", netlinkutil.LinkEvent{Link: user}, false, false},
		{"an endpoint link made while waiting for a base", netlinkutil.LinkEvent{Link: unmarkedEp}, true, false},
		{"a host link made while waiting for a base", netlinkutil.LinkEvent{Link: unmarkedShim}, true, false},
	} {
		if got := f.x.Relevant(tc.ev, tc.waiting); got != tc.want {
			t.Errorf("%s: relevant %v, want %v", tc.name, got, tc.want)
		}
	}
	if !f.x.Relevant(netlinkutil.LinkEvent{Deleted: true, Link: self}, false) {
		t.Error("a claimed self-deletion hid a later one")
	}
}

// Containers starting and stopping on a parent are no repair: the kernel
// announces a link again, unchanged, whenever a link is made on it or
// deleted from it (the fake kernel does as the kernel does), and each such
// event for an owned or a watched parent made a repair pass, which lists
// every link of the host. Fed the fake kernel's events in their order: the
// parents' first events and their changes call for a pass, their
// unchanged announcements do not (unless a repair waits for a base), and
// after a deletion, or events missed, a link's next event does again.
func TestRelevantIgnoresLinksStackedOnParents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t)
	f.addVLAN(t, "eth0.10", "eth0", 10, mark) // owned
	eth1, _ := f.k.Link("eth1")
	f.x.WatchParent("eth1", eth1.Index) // a joined endpoint's parent
	events, err := f.k.Subscribe(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := func() netlinkutil.LinkEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event from the fake kernel")
		}
		return netlinkutil.LinkEvent{}
	}
	// relevant feeds the events up to the next one about name (the
	// links made and deleted in between are endpoints: never relevant)
	// and returns that one's verdict.
	relevant := func(name string, waiting bool) bool {
		t.Helper()
		for {
			ev := next()
			got := f.x.Relevant(ev, waiting)
			if ev.Link.Name == name {
				return got
			}
			if got {
				t.Fatalf("%+v: relevant, want not (an endpoint link)", ev)
			}
		}
	}
	stacked := func(n int) string { return config.EndpointLinkName(fmt.Sprintf("e%063d", n)) }
	stack := func(parent string, n int) {
		t.Helper()
		name := stacked(n)
		if err := f.k.AddEndpoint(ctx, kernel.Endpoint{Name: name, Type: kernel.KindMacvlan, Parent: parent, Mode: "bridge", MAC: fmt.Sprintf("02:00:00:00:00:%02x", n), Mark: mark}); err != nil {
			t.Fatal(err)
		}
	}
	for _, parent := range []string{"eth0.10", "eth1"} {
		f.k.SetDown(parent, false) // its first event: a pass
		if !relevant(parent, false) {
			t.Fatalf("%s's first event: not relevant, want a pass", parent)
		}
		for i := range 3 {
			stack(parent, i)
			if relevant(parent, false) {
				t.Errorf("%s announced unchanged as link %d was made on it: relevant, want no pass", parent, i)
			}
			if err := f.k.Delete(ctx, stacked(i)); err != nil {
				t.Fatal(err)
			}
			if relevant(parent, false) {
				t.Errorf("%s announced unchanged as link %d was deleted from it: relevant, want no pass", parent, i)
			}
		}
		stack(parent, 9)
		if !relevant(parent, true) {
			t.Errorf("%s announced unchanged while a repair waits for a base: not relevant, want a pass", parent)
		}
		f.k.SetDown(parent, true)
		if !relevant(parent, false) {
			t.Errorf("%s set down: not relevant, want a pass", parent)
		}
		if err := f.k.Delete(ctx, stacked(9)); err != nil {
			t.Fatal(err)
		}
		if relevant(parent, false) {
			t.Errorf("%s (down) announced unchanged: relevant, want no pass", parent)
		}
	}
	// A deletion forgets the link: made again alike, it is news.
	f.k.Remove("eth0.10")
	if !relevant("eth0.10", false) {
		t.Error("eth0.10 deleted by someone: not relevant")
	}
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	if !relevant("eth0.10", false) {
		t.Error("eth0.10 made again: not relevant, want a pass")
	}
	// Events the watcher drained while a pass settled are kept too: the
	// next one is compared with them, not with what came before.
	f.k.SetDown("eth1", false)
	for {
		ev := next()
		if ev.Link.Name != "eth1" {
			f.x.Relevant(ev, false) // eth0 announced as eth0.10 was made on it
			continue
		}
		if ev.Link.Down {
			t.Fatalf("event %+v, want eth1 up", ev)
		}
		f.x.Note(ev)
		break
	}
	f.k.SetDown("eth1", true)
	if !relevant("eth1", false) {
		t.Error("eth1 set down after a drained event showed it up: not relevant, want a pass")
	}
	// Missed events (the subscription made again): every link is news.
	f.x.ForgetSeen()
	f.k.SetDown("eth1", true)
	if !relevant("eth1", false) {
		t.Error("eth1 after missed events: not relevant, want a pass")
	}
	// Renamed while up (Linux 6.2 on) and back: each is news, though the
	// link comes back exactly as it was before the first rename.
	stack("eth0.10", 20)
	relevant("eth0.10", false)
	for _, to := range [][2]string{{"eth0.10", "lanmine"}, {"lanmine", "eth0.10"}} {
		if err := f.k.Rename(to[0], to[1]); err != nil {
			t.Fatal(err)
		}
		if !relevant(to[1], false) {
			t.Errorf("%s renamed %s: not relevant, want a pass (the record follows the name)", to[0], to[1])
		}
	}
	// A network created on an owned parent: its next announcement, even
	// unchanged, is a pass's (a parent that is down is healed for it).
	if err := f.k.Delete(ctx, stacked(20)); err != nil {
		t.Fatal(err)
	}
	if relevant("eth0.10", false) {
		t.Error("eth0.10 announced unchanged: relevant, want no pass")
	}
	f.x.ForgetLink("eth0.10")
	stack("eth0.10", 21)
	if !relevant("eth0.10", false) {
		t.Error("eth0.10 announced unchanged after a network was created on it: not relevant, want a pass")
	}
	// A container's interface recorded on a parent index the watcher
	// kept another link of that name under (the parent made again after
	// the pass read the endpoints): its next announcement is a pass's. The
	// same index as kept is no news.
	f.x.WatchParent("eth1", eth1.Index)
	f.k.SetDown("eth1", true)
	if relevant("eth1", false) {
		t.Error("eth1 announced unchanged after a container on it was recorded on its index: relevant, want no pass")
	}
	f.x.WatchParent("eth1", eth1.Index+100)
	f.k.SetDown("eth1", true)
	if !relevant("eth1", false) {
		t.Error("eth1 announced unchanged after a container was recorded on another eth1: not relevant, want a pass")
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The watcher notices an owned VLAN deleted behind underlay's back and
// makes it again while a network needs it; one underlay deleted itself,
// and a user's link, are left gone.
func TestWatchRemakesDeletedOwnedLink(t *testing.T) {
	f := newFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10))
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
	f.k.AddHostLink("user0", "device", 1500)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.x.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	// The first pass (nothing to do) lists the links; the deletion after
	// it is known by its event alone.
	waitFor(t, "the first repair pass", func() bool { return f.k.Calls("list") > 0 })
	f.k.Remove("eth0.10")
	f.k.Remove("user0")
	waitFor(t, "eth0.10 made again", func() bool { l, ok := f.k.Link("eth0.10"); return ok && l.Alias == mark })
	if _, ok := f.k.Link("user0"); ok {
		t.Error("the user's link was made again")
	}
	f.ev.mu.Lock()
	repaired := slices.Clone(f.ev.repair)
	f.ev.mu.Unlock()
	if !slices.Contains(repaired, plan.OpRecreate.String()) {
		t.Errorf("repairs counted %v, want a recreate", repaired)
	}
}

// Repair makes what a pass finds missing and reports a base that is
// missing as Failed (the watcher waits for links to come back).
func TestRepair(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth7.20", "eth7", 20))
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10"), onParent(drivertest.NetB, "eth7.20")})
	out, err := f.x.Repair(ctx)
	if err != nil || !out.Failed {
		t.Fatalf("Repair = %+v, %v; want Failed for eth7.20 (its base is missing)", out, err)
	}
	f.wantLinks(t, "eth0.10")
	f.k.AddHostLink("eth7", "device", 1500)
	if out, err := f.x.Repair(ctx); err != nil || out != (reconcile.Outcome{}) {
		t.Fatalf("Repair with the base back = %+v, %v", out, err)
	}
	f.wantLinks(t, "eth0.10", "eth7", "eth7.20")
	// An owned VLAN set down is set up again.
	f.k.SetDown("eth0.10", true)
	if out, err := f.x.Repair(ctx); err != nil || out != (reconcile.Outcome{}) {
		t.Fatalf("Repair of a VLAN set down = %+v, %v", out, err)
	}
	if l, _ := f.k.Link("eth0.10"); l.Down {
		t.Error("eth0.10 still down after the repair")
	}
}

// A repair pass makes the missing host link of a network with a host
// address, with that address and the mark, and heals one set down.
func TestRepairHostLink(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	n := drivertest.Macvlan(drivertest.NetA, "eth1", "bridge", "198.18.2.0/24")
	n.HostAddress = "198.18.2.5"
	drivertest.Put(t, f.db, []record.Network{n})
	shim := config.ShimName(drivertest.NetA)
	if out, err := f.x.Repair(ctx); err != nil || out != (reconcile.Outcome{}) {
		t.Fatalf("Repair = %+v, %v", out, err)
	}
	l, ok := f.k.Link(shim)
	if !ok || l.Alias != mark || f.k.Parent(shim) != "eth1" {
		t.Fatalf("host link %s = %+v on %q, want made on eth1 with the mark", shim, l, f.k.Parent(shim))
	}
	if as := f.k.Addrs(shim); len(as) != 1 || as[0].String() != "198.18.2.5" {
		t.Errorf("host link addresses %v, want 198.18.2.5", as)
	}
	f.k.SetDown(shim, true)
	f.k.FlushAddrs(shim)
	if _, err := f.x.Repair(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := f.k.Link(shim); l.Down || len(f.k.Addrs(shim)) != 1 {
		t.Errorf("host link %+v with %v after the repair, want up with its address", l, f.k.Addrs(shim))
	}
}
