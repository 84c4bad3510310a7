package leases

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
)

// A block waits for its parent's lock and blocks under the parent the
// store names once it holds it: a follow of the renamed VLAN that held
// the lock meanwhile (moving the network to "mine") makes it lock and
// block "mine", never the old name; a network gone under the lock blocks
// nothing.
func TestBlockOnParentBlocksUnderTheNameAfterAFollow(t *testing.T) {
	db := drivertest.Store(t)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	n.Parent = "eth0.10"
	if err := db.Update(func(tx *store.Tx) error { return tx.PutNetwork(n) }); err != nil {
		t.Fatal(err)
	}
	k := nltest.New()
	addr := netip.MustParseAddr("198.18.1.10")
	var locked []string
	held := false
	lock := func(_ context.Context, names ...string) (func(), error) {
		if held {
			t.Fatal("a second parent lock was taken while one is held")
		}
		held = true
		locked = append(locked, names...)
		if names[0] == "eth0.10" {
			// The follow ran while this waited: the network is on "mine".
			if err := db.Update(func(tx *store.Tx) error {
				n.Parent = "mine"
				return tx.PutNetwork(n)
			}); err != nil {
				t.Fatal(err)
			}
		}
		return func() { held = false }, nil
	}
	parent, err := BlockOnParent(context.Background(), db, k, lock, n.ID, addr, "underlay:test")
	if err != nil || parent != "mine" {
		t.Fatalf("blocked on %q, %v: want mine", parent, err)
	}
	if !slices.Equal(locked, []string{"eth0.10", "mine"}) || held {
		t.Fatalf("locked %v (still held: %v), want eth0.10 then mine, released", locked, held)
	}
	b, _ := k.BlockedAddrs(context.Background(), "underlay:test")
	if want := []netlinkutil.Blocked{{Parent: "mine", Addr: addr, Tag: "underlay:test"}}; fmt.Sprint(b) != fmt.Sprint(want) {
		t.Fatalf("blocked %v, want %v", b, want)
	}
	if err := db.Update(func(tx *store.Tx) error { return tx.DeleteNetwork(n.ID) }); err != nil {
		t.Fatal(err)
	}
	if parent, err := BlockOnParent(context.Background(), db, k, lock, n.ID, netip.MustParseAddr("198.18.1.11"), "underlay:test"); parent != "" || err != nil {
		t.Fatalf("a gone network's block: on %q, %v; want nothing blocked", parent, err)
	}
}
