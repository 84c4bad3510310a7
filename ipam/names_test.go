package ipam

import (
	"testing"
	"time"

	"github.com/underlay-net/underlay/store"
)

// Pools of one subnet on two parents (allowed: two LANs) keep their names
// apart: a name's address on one is not its address on the other.
func TestStickyNamesPerParent(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.pool(t, "", "198.18.31.0/29", "", map[string]string{"parent": "eth0"}, false)
	b := e.pool(t, "", "198.18.31.0/29", "", map[string]string{"parent": "eth1"}, false)
	e.address(t, b.ID, "", nil) // .1 and .2 taken on b
	e.address(t, b.ID, "", nil)
	onA := e.address(t, a.ID, "", named("web")).Addr()
	onB := e.address(t, b.ID, "", named("web")).Addr()
	if onA.String() != "198.18.31.1" || onB.String() != "198.18.31.3" {
		t.Fatalf("web got %s on eth0's pool, %s on eth1's; want .1 and .3", onA, onB)
	}
	if err := e.m.ReleaseAddress(ctx, a.ID, onA.String()); err != nil {
		t.Fatal(err)
	}
	if again := e.address(t, a.ID, "", named("web")).Addr(); again != onA {
		t.Errorf("web came back to eth0's pool at %s, want its %s there (eth1's pool must not have moved it)", again, onA)
	}
	names, err := e.m.Names(ctx)
	if err != nil || len(names) != 2 || names[0].Space == names[1].Space {
		t.Fatalf("names %+v, %v: want web twice, in two scopes", names, err)
	}
}

// SweepNames, run at start, forgets names released nameTTL ago in subnets
// no pool asks for any more, and keeps the others.
func TestSweepNames(t *testing.T) {
	e := newEnv(t, nil, nil)
	old := e.pool(t, "", "198.18.32.0/29", "", nil, false)
	kept := e.pool(t, "", "198.18.33.0/29", "", nil, false)
	gone := e.address(t, old.ID, "", named("old"))
	e.address(t, kept.ID, "", named("held")) // held: never forgotten
	if err := e.m.ReleaseAddress(ctx, old.ID, gone.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := e.m.ReleasePool(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(nameTTL - time.Minute)
	if err := e.m.SweepNames(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedNames(t, e); n != 2 {
		t.Fatalf("%d names stored before their time, want 2", n)
	}
	e.clock.Advance(2 * time.Minute)
	if err := e.m.SweepNames(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedNames(t, e); n != 1 {
		t.Fatalf("%d names stored after the sweep, want 1 (held's)", n)
	}
}

func storedNames(t *testing.T, e *env) int {
	t.Helper()
	var n int
	if err := e.db.View(func(tx *store.Tx) error {
		names, err := tx.AllIPAMNames()
		n = len(names)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
