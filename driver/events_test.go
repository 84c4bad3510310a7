package driver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// eventLog is an Events counting every call by name and argument.
type eventLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *eventLog) add(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[name]++
}

func (e *eventLog) ConflictRefused()                  { e.add("conflict") }
func (e *eventLog) StaleRemoved()                     { e.add("stale") }
func (e *eventLog) ReservationRolledBack(kind string) { e.add("rollback/" + kind) }
func (e *eventLog) ReconcileAction(op string)         { e.add("reconcile/" + op) }
func (e *eventLog) RepairAction(op string)            { e.add("repair/" + op) }
func (e *eventLog) ContainerRepair(r string)          { e.add("container/" + r) }

func (e *eventLog) want(t *testing.T, want map[string]int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if fmt.Sprint(e.n) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", e.n, want)
	}
}

func TestEventsConflictAndStaleHolder(t *testing.T) {
	f := newFixture(t)
	ev := &eventLog{}
	f.count(ev)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	f.docker.setLive(netA)
	wantErr(t, f.create(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}}), pluginapi.ErrConflict)
	ev.want(t, map[string]int{"conflict": 1})
	// Docker forgot netA: it is removed as a stale holder, nothing refused.
	f.docker.setLive()
	f.clock.Advance(time.Minute)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}})
	ev.want(t, map[string]int{"conflict": 1, "stale": 1})
	// Another create's refusal (bad input) is no conflict of holders.
	wantErr(t, f.create(netReq{ID: netC, Opts: map[string]string{"parent": "eth0", "mtu": "1"}}), pluginapi.ErrInvalid)
	ev.want(t, map[string]int{"conflict": 1, "stale": 1})
}

func TestEventsJanitorRollback(t *testing.T) {
	f := newFixture(t)
	ev := &eventLog{}
	f.count(ev)
	entered, release := make(chan struct{}), make(chan struct{})
	f.k.SetFault(func(op, name string) error {
		if op == "vlan" {
			close(entered)
			<-release
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.60"}}) }()
	<-entered
	f.d.reconcile.JanitorTick(context.Background())
	ev.want(t, map[string]int{})
	f.clock.Advance(61 * time.Second)
	f.d.reconcile.JanitorTick(context.Background())
	close(release)
	<-done
	// The request's own undo of what it made after the rollback is not a
	// reservation rolled back (there is none left).
	ev.want(t, map[string]int{"rollback/network": 1})
}

func TestEventsRestoreAndRepair(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.2.0/24"}})
	if err := f.db.Update(func(tx *store.Tx) error {
		n := drivertest.Macvlan(netA, "eth0.20", "bridge", "198.18.1.0/24")
		n.Pending = &record.Reservation{Token: "dead", Deadline: time.Now().Add(time.Hour)}
		if err := tx.PutParentLink(record.ParentLink{Name: "eth0.20", Kind: "vlan", Base: "eth0", VLAN: 20}); err != nil {
			return err
		}
		return tx.PutNetwork(n)
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.AddVLAN(context.Background(), "eth0.20", "eth0", 20, 0, f.d.mark); err != nil {
		t.Fatal(err)
	}
	if err := f.k.Delete(context.Background(), "eth0.10"); err != nil { // a reboot took it
		t.Fatal(err)
	}
	ev := &eventLog{}
	f.count(ev)
	if err := f.d.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wantLinks("eth0.10")
	ev.want(t, map[string]int{"rollback/network": 1, "reconcile/rollback": 1, "reconcile/recreate": 1, "reconcile/release": 1})

	// Live repair: the needed VLAN goes away and a pass makes it again.
	if err := f.k.Delete(context.Background(), "eth0.10"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.reconcile.Repair(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.wantLinks("eth0.10")
	ev.want(t, map[string]int{"rollback/network": 1, "reconcile/rollback": 1, "reconcile/recreate": 1, "reconcile/release": 1, "repair/recreate": 1})
}
