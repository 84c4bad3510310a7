package links_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The owned links over the fake kernel and a real state file, as the
// driver wires them.

var mark = kernel.Mark("owned-test")

const otherMark = "underlay:someone-else"

type fixture struct {
	k     *nltest.Kernel
	db    *store.DB
	locks *keylock.Locker
	o     *links.Owned
	del   *links.SelfDeletions
}

// newFixture is a kernel with eth0 and eth1, an empty state file and the
// owned links of the instance with mark.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	k := nltest.New()
	k.AddHostLink("eth0", "device", 1500)
	k.AddHostLink("eth1", "device", 9000)
	f := &fixture{k: k, db: drivertest.Store(t), locks: keylock.New(), del: &links.SelfDeletions{}}
	f.o = &links.Owned{Kernel: k, Store: f.db, Locks: f.locks, Parents: &links.Maker{Links: k, Mark: mark},
		Resolver: &links.Resolver{Links: k}, Mark: mark, Blocks: k, Log: slog.New(slog.DiscardHandler),
		Now: time.Now, Deleting: f.del}
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

// parents are the owned parent links the state file records, by name.
func (f *fixture) parents(t *testing.T) map[string]record.ParentLink {
	t.Helper()
	out := map[string]record.ParentLink{}
	if err := f.db.View(func(tx *store.Tx) error {
		ps, err := tx.ParentLinks()
		for _, p := range ps {
			out[p.Name] = p
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) network(t *testing.T, id string) record.Network {
	t.Helper()
	var n record.Network
	if err := f.db.View(func(tx *store.Tx) (err error) {
		var ok bool
		if n, ok, err = tx.Network(id); err == nil && !ok {
			t.Fatalf("network %s has no record", id)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func vlan(name, base string, id int) record.ParentLink {
	return record.ParentLink{Name: name, Kind: kernel.KindVLAN, Base: base, VLAN: id}
}

// onParent is a network on parent, asked for as parent.
func onParent(id, parent string) record.Network {
	n := drivertest.Macvlan(id, parent, "bridge", "198.18.1.0/24")
	n.Options = map[string]string{config.OptParent: parent}
	return n
}

// Follow moves the record of a renamed owned VLAN to its new name, with
// the networks on it (keeping the parent as asked), the owned VLANs on it
// and the blocks of lost leases on it; the kernel's links stay as they are.
func TestFollowRenamedVLAN(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	f.addVLAN(t, "eth0.10.5", "eth0.10", 5, mark)
	f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth0.10.5", "eth0.10", 5))
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10"), onParent(drivertest.NetB, "eth0.10.5")})
	lost := netip.MustParseAddr("198.18.1.7")
	if err := f.k.Block(ctx, "eth0.10", lost, mark); err != nil {
		t.Fatal(err)
	}
	if err := f.k.Rename("eth0.10", "mine"); err != nil {
		t.Fatal(err)
	}
	before := f.k.Names()

	if err := f.o.Follow(ctx, "eth0.10", "mine", ""); err != nil {
		t.Fatalf("Follow = %v", err)
	}
	if got := f.k.Names(); !slices.Equal(got, before) {
		t.Errorf("links %v after Follow, were %v: nothing is made or deleted", got, before)
	}
	ps := f.parents(t)
	if _, ok := ps["eth0.10"]; ok {
		t.Errorf("the record of the old name eth0.10 stays: %+v", ps)
	}
	if p := ps["mine"]; p != vlan("mine", "eth0", 10) {
		t.Errorf("record of mine = %+v, want VLAN 10 on eth0", p)
	}
	if p := ps["eth0.10.5"]; p.Base != "mine" {
		t.Errorf("the owned VLAN on it still stands on %q, want mine", p.Base)
	}
	n := f.network(t, drivertest.NetA)
	if n.Parent != "mine" || n.Options[config.OptParent] != "eth0.10" {
		t.Errorf("network on it: parent %q, option %q; want mine, the option as asked (eth0.10)", n.Parent, n.Options[config.OptParent])
	}
	if n := f.network(t, drivertest.NetB); n.Parent != "eth0.10.5" {
		t.Errorf("network on the VLAN above moved to %q", n.Parent)
	}
	blocked, err := f.k.BlockedAddrs(ctx, mark)
	if err != nil || len(blocked) != 1 || blocked[0].Parent != "mine" || blocked[0].Addr != lost {
		t.Errorf("blocks after Follow = %+v, %v; want %s on mine", blocked, err, lost)
	}
}

// Follow moves nothing unless the link under the new name is the owned
// VLAN renamed: this instance's mark, the record's VLAN ID, a name no
// record has, a VLAN record.
func TestFollowLeavesOtherLinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *fixture)
	}{
		{"another instance's mark", func(t *testing.T, f *fixture) {
			f.addVLAN(t, "mine", "eth0", 10, otherMark)
		}},
		{"no mark", func(t *testing.T, f *fixture) {
			f.addVLAN(t, "mine", "eth0", 10, "")
		}},
		{"another VLAN ID", func(t *testing.T, f *fixture) {
			f.addVLAN(t, "mine", "eth0", 11, mark)
		}},
		{"the new name recorded already", func(t *testing.T, f *fixture) {
			f.addVLAN(t, "mine", "eth0", 10, mark)
			f.putParent(t, vlan("mine", "eth1", 10))
		}},
		{"the record is a dummy", func(t *testing.T, f *fixture) {
			f.addVLAN(t, "mine", "eth0", 10, mark)
			f.putParent(t, record.ParentLink{Name: "eth0.10", Kind: kernel.KindDummy})
		}},
		{"no link of the new name", func(t *testing.T, f *fixture) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putParent(t, vlan("eth0.10", "eth0", 10))
			drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})
			tc.setup(t, f)
			before := f.parents(t)
			if err := f.o.Follow(context.Background(), "eth0.10", "mine", ""); err != nil && !errors.Is(err, netlinkutil.ErrNotFound) {
				t.Fatalf("Follow = %v", err)
			}
			if got := f.parents(t); len(got) != len(before) || got["eth0.10"] != before["eth0.10"] || got["mine"] != before["mine"] {
				t.Errorf("records %+v after Follow, were %+v", got, before)
			}
			if n := f.network(t, drivertest.NetA); n.Parent != "eth0.10" {
				t.Errorf("the network moved to %q", n.Parent)
			}
		})
	}
}

type failingMover struct{}

func (failingMover) MoveBlocks(context.Context, string, string, string) ([]netip.Addr, error) {
	return nil, errors.New("nft: no such table")
}

// A Follow whose blocks cannot move changes nothing (one transaction) and
// says why; one whose link is locked by a request waits (ErrBusy).
func TestFollowFailsWhole(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.addVLAN(t, "mine", "eth0", 10, mark)
	f.putParent(t, vlan("eth0.10", "eth0", 10))
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10")})

	unlock, ok := f.locks.TryExclusive(keylock.ParentKey("mine"))
	if !ok {
		t.Fatal("lock taken")
	}
	if err := f.o.Follow(ctx, "eth0.10", "mine", ""); !errors.Is(err, links.ErrBusy) {
		t.Errorf("Follow with the new name's lock taken = %v, want ErrBusy", err)
	}
	unlock()

	f.o.Blocks = failingMover{}
	err := f.o.Follow(ctx, "eth0.10", "mine", "")
	drivertest.WantErr(t, err, nil, "follow VLAN eth0.10 renamed to mine", "blocks of lost leases", "nft: no such table")
	if ps := f.parents(t); len(ps) != 1 || ps["eth0.10"].Name != "eth0.10" {
		t.Errorf("records after a failed Follow: %+v, want eth0.10 only", ps)
	}
	if n := f.network(t, drivertest.NetA); n.Parent != "eth0.10" {
		t.Errorf("the network moved to %q by a failed Follow", n.Parent)
	}
}

// Delete deletes only a link that is underlay's (its mark, or no mark and
// recorded), remembers its index for the watcher, and leaves every other
// link alone without an error.
func TestDelete(t *testing.T) {
	for _, tc := range []struct {
		name     string
		alias    string
		recorded bool
		deleted  bool
	}{
		{"this instance's mark", mark, false, true},
		{"this instance's mark, recorded", mark, true, true},
		{"no mark, recorded (made before marks)", "", true, true},
		{"no mark, not recorded", "", false, false},
		{"another instance's mark, recorded", otherMark, true, false},
		{"another instance's mark", otherMark, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.addVLAN(t, "eth0.10", "eth0", 10, tc.alias)
			l, _ := f.k.Link("eth0.10")
			if err := f.o.Delete(context.Background(), "eth0.10", tc.recorded); err != nil {
				t.Fatalf("Delete = %v", err)
			}
			if _, there := f.k.Link("eth0.10"); there == tc.deleted {
				t.Errorf("link there after Delete: %v, want %v", there, !tc.deleted)
			}
			if claimed := f.del.Claim(l.Index); claimed != tc.deleted {
				t.Errorf("deletion remembered for the watcher: %v, want %v", claimed, tc.deleted)
			}
		})
	}
}

// Delete of a missing link, or of a name that is only another link's
// altname, is no error and deletes nothing; the kernel's refusal is
// returned.
func TestDeleteMissingAndFailing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.addVLAN(t, "eth0.10", "eth0", 10, mark)
	f.k.AddAltName("eth0.10", "alt10")
	if err := f.o.Delete(ctx, "gone0", true); err != nil {
		t.Errorf("Delete of a missing link = %v", err)
	}
	if err := f.o.Delete(ctx, "alt10", true); err != nil {
		t.Errorf("Delete of an altname = %v", err)
	}
	if _, ok := f.k.Link("eth0.10"); !ok {
		t.Fatal("Delete of its altname deleted eth0.10")
	}
	f.k.SetFault(func(op, name string) error {
		if op == "delete" {
			return errors.New("operation not permitted")
		}
		return nil
	})
	drivertest.WantErr(t, f.o.Delete(ctx, "eth0.10", true), nil, "operation not permitted")
}

// Ensure re-creates a missing owned parent (its owned base first), follows
// an owned VLAN renamed, creates and owns a missing VLAN the network asked
// for by IFACE.VID, and names what is missing otherwise.
func TestEnsure(t *testing.T) {
	ctx := context.Background()
	t.Run("missing owned VLAN on a missing owned VLAN", func(t *testing.T) {
		f := newFixture(t)
		f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth0.10.5", "eth0.10", 5))
		n := onParent(drivertest.NetA, "eth0.10.5")
		drivertest.Put(t, f.db, []record.Network{n})
		got, err := f.o.Ensure(ctx, n)
		if err != nil || got != "eth0.10.5" {
			t.Fatalf("Ensure = %q, %v", got, err)
		}
		for name, base := range map[string]string{"eth0.10": "eth0", "eth0.10.5": "eth0.10"} {
			if l, ok := f.k.Link(name); !ok || l.Alias != mark || f.k.Parent(name) != base {
				t.Errorf("link %s = %+v (on %q), want made with the mark on %s", name, l, f.k.Parent(name), base)
			}
		}
	})
	t.Run("owned VLAN renamed", func(t *testing.T) {
		f := newFixture(t)
		f.addVLAN(t, "mine", "eth0", 10, mark)
		f.putParent(t, vlan("eth0.10", "eth0", 10))
		n := onParent(drivertest.NetA, "eth0.10")
		drivertest.Put(t, f.db, []record.Network{n})
		got, err := f.o.Ensure(ctx, n)
		if err != nil || got != "mine" {
			t.Fatalf("Ensure = %q, %v; want the new name mine", got, err)
		}
		if _, ok := f.k.Link("eth0.10"); ok {
			t.Error("a second VLAN 10 was made")
		}
		if n := f.network(t, drivertest.NetA); n.Parent != "mine" {
			t.Errorf("the network stays on %q", n.Parent)
		}
	})
	t.Run("VLAN asked for, not owned, missing", func(t *testing.T) {
		f := newFixture(t)
		n := onParent(drivertest.NetA, "eth0.20")
		drivertest.Put(t, f.db, []record.Network{n})
		if got, err := f.o.Ensure(ctx, n); err != nil || got != "eth0.20" {
			t.Fatalf("Ensure = %q, %v", got, err)
		}
		if l, ok := f.k.Link("eth0.20"); !ok || l.VLAN != 20 || l.Alias != mark {
			t.Errorf("eth0.20 = %+v, %v; want VLAN 20 with the mark", l, ok)
		}
		if p, ok := f.parents(t)["eth0.20"]; !ok || p != vlan("eth0.20", "eth0", 20) {
			t.Errorf("eth0.20 not owned from now on: %+v", f.parents(t))
		}
	})
	t.Run("VLAN asked for, its base missing", func(t *testing.T) {
		f := newFixture(t)
		n := onParent(drivertest.NetA, "eth7.20")
		drivertest.Put(t, f.db, []record.Network{n})
		_, err := f.o.Ensure(ctx, n)
		drivertest.WantErr(t, err, nil, "parent eth7.20 of network aaaaaaaaaaaa is gone")
		if ps := f.parents(t); len(ps) != 0 {
			t.Errorf("records after a failed Ensure: %+v", ps)
		}
	})
	t.Run("existing parent", func(t *testing.T) {
		f := newFixture(t)
		before := f.k.Names()
		if got, err := f.o.Ensure(ctx, onParent(drivertest.NetA, "eth1")); err != nil || got != "eth1" {
			t.Fatalf("Ensure = %q, %v", got, err)
		}
		if !slices.Equal(f.k.Names(), before) {
			t.Errorf("links %v, were %v", f.k.Names(), before)
		}
	})
}

// Needed: a network names the link, or an owned link standing on it is
// needed.
func TestNeeded(t *testing.T) {
	f := newFixture(t)
	f.putParent(t, vlan("eth0.10", "eth0", 10), vlan("eth0.10.5", "eth0.10", 5), vlan("eth0.11", "eth0", 11))
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "eth0.10.5")})
	want := map[string]bool{"eth0": true, "eth0.10": true, "eth0.10.5": true, "eth0.11": false, "eth1": false}
	_ = f.db.View(func(tx *store.Tx) error {
		for name, w := range want {
			if got := links.Needed(tx, name); got != w {
				t.Errorf("Needed(%s) = %v, want %v", name, got, w)
			}
		}
		return nil
	})
}

// Repoint moves the networks on one name to another, keeping the parent
// as asked.
func TestRepoint(t *testing.T) {
	f := newFixture(t)
	f.k.AddAltName("eth1", "lan0")
	older := drivertest.Macvlan(drivertest.NetC, "lan0", "bridge", "198.18.3.0/24") // no options: a record of an older version
	drivertest.Put(t, f.db, []record.Network{onParent(drivertest.NetA, "lan0"), onParent(drivertest.NetB, "eth0"), older})
	if err := f.o.Repoint("lan0", "eth1"); err != nil {
		t.Fatal(err)
	}
	if n := f.network(t, drivertest.NetA); n.Parent != "eth1" || n.Options[config.OptParent] != "lan0" {
		t.Errorf("network A: parent %q, option %q", n.Parent, n.Options[config.OptParent])
	}
	if n := f.network(t, drivertest.NetB); n.Parent != "eth0" {
		t.Errorf("network B moved to %q", n.Parent)
	}
	if n := f.network(t, drivertest.NetC); n.Parent != "eth1" || n.Options[config.OptParent] != "lan0" {
		t.Errorf("network without options: parent %q, options %v; want eth1, the parent as asked (lan0) kept", n.Parent, n.Options)
	}
}
