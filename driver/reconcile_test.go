package driver

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

func TestRestartKeepsEverything(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.restart()
	f.wantNetworks(netA)
	f.wantLinks("eth0.10", link)
	// Same ID after the restart: reused.
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.wantNetworks(netA)
	// The endpoint made before is known: DeleteEndpoint removes its link.
	if err := f.d.DeleteEndpoint(context.Background(), &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	f.wantLinks("eth0.10")
}

func TestRestoreAfterReboot(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustCreate(netReq{ID: netB, V4: []string{"198.18.2.0/24"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	// A reboot: every link underlay made is gone.
	for _, name := range []string{"eth0.10", "ulibbbbbbbbbbbb", link} {
		f.k.Remove(name)
	}
	f.boot = "boot-2"
	f.restart()
	f.wantLinks("eth0.10", "ulibbbbbbbbbbbb")
	if l, _ := f.k.Link("eth0.10"); l.VLAN != 10 || f.k.Parent("eth0.10") != "eth0" {
		t.Fatalf("VLAN re-created as %+v", l)
	}
	// The endpoint can join again.
	if _, err := f.join(netA, epA); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreRemovesStrayLinksOnly(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	known := f.mustEndpoint(netA, epA, "")
	ctx := context.Background()
	mk := func(name, typ, mark string) {
		if err := f.k.AddEndpoint(ctx, kernel.Endpoint{Name: name, Parent: "eth1", Type: typ, Mode: map[string]string{"macvlan": "bridge", "ipvlan": "l2"}[typ], Flag: "bridge", Mark: mark}); err != nil {
			t.Fatal(err)
		}
	}
	mk("ule0123456789ab", "macvlan", f.d.mark)             // endpoint link nobody owns, ours
	mk("ule0123456789ac", "macvlan", "")                   // the name form, no mark: not ours to judge
	mk("ule0123456789ad", "macvlan", kernel.Mark("other")) // another instance's
	mk("mymacvlan", "macvlan", "")                         // the administrator's
	f.k.AddHostLink("ule999999999999", "veth", 1500)
	if err := f.k.AddDummy(ctx, "uli0123456789ab", 0, f.d.mark); err != nil { // our dummy, not owned any more
		t.Fatal(err)
	}
	if err := f.k.AddDummy(ctx, "uli0123456789ac", 0, ""); err != nil { // a dummy of underlay's form, unmarked
		t.Fatal(err)
	}
	f.restart()
	f.wantLinks(known, "mymacvlan", "ule0123456789ac", "ule0123456789ad", "ule999999999999", "uli0123456789ac")
}

func TestRestoreRollsBackOrphanedReservation(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.2.0/24"}})
	// A process died between reserving and committing, after creating the
	// VLAN it owns (eth0.20) and while sharing eth0.10.
	if err := f.db.Update(func(tx *store.Tx) error {
		if err := tx.PutParentLink(record.ParentLink{Name: "eth0.20", Kind: "vlan", Base: "eth0", VLAN: 20}); err != nil {
			return err
		}
		for _, n := range []record.Network{drivertest.Macvlan(netA, "eth0.20", "bridge", "198.18.1.0/24"), drivertest.Macvlan(netC, "eth0.10", "bridge", "198.18.3.0/24")} {
			n.Pending = &record.Reservation{Token: "dead", Deadline: time.Now().Add(time.Hour)}
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.AddVLAN(context.Background(), "eth0.20", "eth0", 20, 0, f.d.mark); err != nil {
		t.Fatal(err)
	}
	f.restart()
	f.wantNetworks(netB)
	f.wantLinks("eth0.10")
	// Docker's retry of the create then succeeds.
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.20"}})
	f.wantLinks("eth0.10", "eth0.20")
}

func TestRestoreDeletesOwnedParentNoNetworkUses(t *testing.T) {
	f := newFixture(t)
	if err := f.db.Update(func(tx *store.Tx) error {
		return tx.PutParentLink(record.ParentLink{Name: "eth0.30", Kind: "vlan", Base: "eth0", VLAN: 30})
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.AddVLAN(context.Background(), "eth0.30", "eth0", 30, 0, ""); err != nil { // made before marks: recorded, unmarked
		t.Fatal(err)
	}
	f.restart()
	f.wantLinks()
	var parents []record.ParentLink
	_ = f.db.View(func(tx *store.Tx) (err error) { parents, err = tx.ParentLinks(); return err })
	if len(parents) != 0 {
		t.Fatalf("parent records left: %+v", parents)
	}
}

func TestCrashPointsAreAllReachedAndListed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustEndpoint(netA, epA, "")
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10", "mtu": "1400"}}) // replace
	f.mustEndpoint(netA, epA, "")
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range f.points {
		seen[p] = true
	}
	listed := map[string]bool{}
	for _, p := range CrashPoints() {
		listed[p] = true
		if !seen[p] {
			t.Errorf("crash point %s listed but never reached", p)
		}
	}
	for p := range seen {
		if !listed[p] {
			t.Errorf("crash point %s reached but not listed in CrashPoints", p)
		}
	}
}

// The janitor releases a parent link only under its lock: while a request
// holds it, the link stays, and the next tick releases it.
func TestJanitorReleasesParentsUnderTheirLock(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	// A reservation that expired while its request still runs.
	if err := f.db.Update(func(tx *store.Tx) error {
		n, _, err := tx.Network(netA)
		n.Pending = &record.Reservation{Token: "t", Deadline: f.clock.Now().Add(-time.Second)}
		if err != nil {
			return err
		}
		return tx.PutNetwork(n)
	}); err != nil {
		t.Fatal(err)
	}
	_, unlock, err := f.d.locks.Acquire(context.Background(), keylock.Exclusive(keylock.ParentKey("eth0.10")))
	if err != nil {
		t.Fatal(err)
	}
	f.d.reconcile.JanitorTick(context.Background())
	f.wantNetworks() // the reservation is rolled back without locks...
	f.wantLinks("eth0.10")
	unlock() // ...the link only once its lock is free
	f.d.reconcile.JanitorTick(context.Background())
	f.wantLinks()
}

// A version before parent resolution recorded the parent as asked, an
// altname included: at start such networks move to the kernel name, so a
// conflicting network on the kernel name is refused.
func TestRestoreMovesAltnameParentsToTheKernelName(t *testing.T) {
	f := newFixture(t)
	f.k.AddAltName("eth0", "lan0")
	old := drivertest.Macvlan(netA, "lan0", "passthru", "198.18.1.0/24") // as an older version stored it: no options
	if err := f.db.Update(func(tx *store.Tx) error { return tx.PutNetwork(old) }); err != nil {
		t.Fatal(err)
	}
	f.restart()
	n, _ := f.record(netA)
	if n.Parent != "eth0" || plan.RequestedParent(n) != "lan0" {
		t.Fatalf("record on %s asked %q, want eth0 asked lan0", n.Parent, plan.RequestedParent(n))
	}
	f.clock.Advance(time.Hour)
	f.docker.setLive(netA)
	wantErr(t, f.create(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.2.0/24"}}), pluginapi.ErrConflict, "aaaaaaaaaaaa", "passthru")
	// The same network asked again as before is reused.
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "lan0", "macvlan_mode": "passthru"}, V4: []string{"198.18.1.0/24"}})
	f.wantNetworks(netA)
}

// A state file of an underlay before networks kept their options typed:
// Restore types them once from the options, as CreateNetwork would have,
// and readers then see them (the announcements' count, the probe).
func TestRestoreTypesTheOptionsOfOlderRecords(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "mac_address_policy": "random", "address_probe": "1s",
		config.OptAdvertiseNMsgs: "1", config.OptAdvertiseMs: "500"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.2.0/24"}})
	want := map[string]record.Network{}
	for _, id := range []string{netA, netB} {
		n, _ := f.record(id)
		if n.Config == (record.NetworkConfig{}) {
			t.Fatalf("CreateNetwork stored %s without its typed configuration", id)
		}
		want[id] = n
		// Written the old way: the options only.
		n.Config = record.NetworkConfig{}
		if err := f.db.Update(func(tx *store.Tx) error { return tx.PutNetwork(n) }); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := f.record(netA); n.Config != (record.NetworkConfig{}) {
		t.Fatalf("the old-style record has a configuration: %+v", n.Config)
	}
	f.restart()
	for id, w := range want {
		if n, _ := f.record(id); !reflect.DeepEqual(n, w) {
			t.Errorf("network %s after Restore:\n%+v\nwant\n%+v", id, n, w)
		}
	}
	a, _ := f.record(netA)
	if c := a.Config; c.MACPolicy != config.MacRandom || c.Probe != (record.AddressProbe{Budget: time.Second, Given: true}) ||
		c.Announce != (record.Announce{Count: 1, Interval: 500 * time.Millisecond}) {
		t.Errorf("typed configuration %+v does not hold the options given", c)
	}
	// Once: a record already typed is left alone.
	f.close()
	f.open()
	x := f.d.reconcile
	if n, err := x.MigrateConfig(); err != nil || n != 0 {
		t.Fatalf("a second migration changed %d records, %v", n, err)
	}
}
