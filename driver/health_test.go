package driver

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"golang.org/x/sys/unix"
)

// underlay's own deletion of an owned link (DeleteNetwork) is remembered
// for the watcher; an operator's is not.
func TestOwnDeletionsAreRemembered(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	l, _ := f.k.Link("eth0.10")
	f.del(netA)
	// The watcher's question at the announcement of that deletion, asked
	// of the driver's own executor: no repair pass, once.
	ev := netlinkutil.LinkEvent{Deleted: true, Link: kernel.Link{Name: "eth0.10", Index: l.Index, Kind: kernel.KindVLAN, Alias: f.d.mark}}
	if f.d.reconcile.Relevant(ev, false) {
		t.Fatal("DeleteNetwork's deletion of its VLAN was not remembered: its announcement makes a repair pass")
	}
	if !f.d.reconcile.Relevant(ev, false) {
		t.Error("the remembered deletion hid a later one of the same index")
	}
}

func TestWatcherHealsBrokenOwnedLinks(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10", config.OptHostAddress: "198.18.1.5"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, Aux: []string{"198.18.1.5"}})
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.d.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	shim := config.ShimName(netA)
	up := func(name string) func() bool {
		return func() bool { l, ok := f.k.Link(name); return ok && !l.Down }
	}
	hasAddr := func() bool {
		as := f.k.Addrs(shim)
		return len(as) == 1 && as[0] == netip.MustParseAddr("198.18.1.5")
	}
	f.k.SetDown(shim, true)
	waitFor(t, "the host link up again", up(shim))
	f.k.FlushAddrs(shim)
	waitFor(t, "the host link's address back", hasAddr)
	f.k.SetDown("eth0.10", true)
	waitFor(t, "the owned VLAN up again", up("eth0.10"))
	// Renamed: the record follows the link; nothing is made or deleted.
	if err := f.k.Rename("eth0.10", "mine"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the record to follow the renamed VLAN", func() bool {
		var ok bool
		_ = f.db.View(func(tx *store.Tx) (err error) { _, ok, err = tx.ParentLink("mine"); return err })
		n, _ := f.record(netA)
		return ok && n.Parent == "mine"
	})
	if _, ok := f.k.Link("eth0.10"); ok {
		t.Fatal("a second VLAN 10 was made")
	}
	n, _ := f.record(netA)
	if n.Options["parent"] != "eth0.10" {
		t.Fatalf("the parent option as asked changed: %q", n.Options["parent"])
	}
	// A restart keeps it: it is recorded, not a stray.
	cancel()
	f.restart()
	if _, ok := f.k.Link("mine"); !ok {
		t.Fatal("the renamed VLAN was deleted at restart")
	}
	if _, ok := f.k.Link(config.EndpointLinkName(epA)); !ok {
		t.Fatal("the endpoint's link on the renamed VLAN went")
	}
}

// A Join on a network whose host link an operator set down and flushed
// heals it and answers, instead of failing with "network is down".
func TestJoinHealsABrokenHostLink(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	shim := config.ShimName(netA)
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.k.SetDown(shim, true)
	f.k.FlushAddrs(shim)
	f.mustEndpoint(netA, epB, "198.18.1.11/24")
	if l, _ := f.k.Link(shim); l.Down || len(f.k.Addrs(shim)) != 1 {
		t.Fatalf("host link not healed: %+v, addresses %v", l, f.k.Addrs(shim))
	}
	f.wantRoutes(map[string]string{"198.18.1.10": shim, "198.18.1.11": shim})
	// An unmarked leftover of the host link's name is replaced.
	f.k.Remove(shim)
	f.k.AddLink(kernel.Link{Name: shim, Kind: "macvlan", ParentIndex: 2})
	f.mustEndpoint(netA, epC, "198.18.1.12/24")
	if l, _ := f.k.Link(shim); l.Alias != f.d.mark || len(f.k.Addrs(shim)) != 1 {
		t.Fatalf("leftover host link not replaced: %+v", l)
	}
	// A host link an operator renamed is not doubled: the copy goes.
	if err := f.k.Rename(shim, "myshim"); err != nil {
		t.Fatal(err)
	}
	f.mustEndpoint(netA, epD, "198.18.1.13/24")
	if _, ok := f.k.Link("myshim"); ok {
		t.Fatal("two host links carry the network's address")
	}
}

func TestSameAddressOnTwoHostAddressNetworksRefused(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	f.mustCreate(withHost(netB, "eth1", "198.18.1.6"))
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	_, err := f.endpoint(netB, epB, "198.18.1.10/24", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.1.10", dockerid.Short(netA), "--ip")
	f.mustEndpoint(netB, epC, "198.18.1.11/24")
	f.wantRoutes(map[string]string{"198.18.1.10": config.ShimName(netA), "198.18.1.11": config.ShimName(netB)})
}

func TestJoinNamesALoweredParentMTU(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth1", "mtu": "9000"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	f.k.SetMTU("eth1", 1500)
	if _, err := f.endpoint(netA, epA, "198.18.1.10/24", ""); err != nil {
		t.Fatal(err)
	}
	_, err := f.join(netA, epA)
	wantErr(t, err, nil, "MTU 9000", "MTU 1500", "eth1", "mtu=1500")
}

// The kernel's EEXIST for a VLAN no link of the namespace has (a VLAN of
// that ID moved into another namespace keeps it) is said as such.
func TestVLANMovedAwaySaysSo(t *testing.T) {
	f := newFixture(t)
	f.k.SetFault(func(op, name string) error {
		if op == "vlan" {
			return fmt.Errorf("vlan 10 on eth0: %w", unix.EEXIST)
		}
		return nil
	})
	err := f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	wantErr(t, err, pluginapi.ErrConflict, "moved into another network namespace", "VLAN 10")
}

// A same-ID re-create (swarm after a restart, Docker's replay) of a
// network whose host link an operator set down and flushed heals it and
// answers, instead of failing.
func TestReuseHealsABrokenHostLink(t *testing.T) {
	f := newFixture(t)
	r := withHost(netA, "eth0", "198.18.1.5")
	f.mustCreate(r)
	shim := config.ShimName(netA)
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.k.SetDown(shim, true)
	f.k.FlushAddrs(shim)
	f.mustCreate(r) // the same ID and options again
	if l, _ := f.k.Link(shim); l.Down || len(f.k.Addrs(shim)) != 1 {
		t.Fatalf("the re-create left the host link broken: %+v, addresses %v", l, f.k.Addrs(shim))
	}
	f.wantRoutes(map[string]string{"198.18.1.10": shim})
}
