package driver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The repairs doctor asks for check their finding again and follow the
// request rules.
func TestDoctorRepairs(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.grace = 3 * time.Second
	f.close()
	f.open()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "eth0.10"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{config.OptParent: "eth1"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	link := f.mustEndpoint(netA, ep1, "198.18.1.10/24")

	inv, err := f.d.Inventory(ctx)
	if err != nil || len(inv.Networks) != 2 || len(inv.Endpoints) != 1 || len(inv.Owned) != 1 || inv.Mark != f.d.mark || inv.Use["eth0.10"] != 1 {
		t.Fatalf("Inventory = %+v, %v", inv, err)
	}

	// Stale removal: not within the grace period, not while Docker knows
	// it, not when Docker cannot tell; then yes.
	f.docker.setLive(netA, netB)
	if _, err := f.d.RemoveStaleNetwork(ctx, netB); err == nil || !strings.Contains(err.Error(), "within the 3s") {
		t.Errorf("young network: %v", err)
	}
	f.clock.Advance(time.Minute)
	if _, err := f.d.RemoveStaleNetwork(ctx, netB); !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), "Docker knows it") {
		t.Errorf("network Docker knows: %v", err)
	}
	f.docker.setLive(netA)
	if res, err := f.d.RemoveStaleNetwork(ctx, netB); err != nil || !strings.Contains(res, "removed network bbbbbbbbbbbb") {
		t.Errorf("stale network: %q, %v", res, err)
	}
	f.wantNetworks(netA)
	if res, _ := f.d.RemoveStaleNetwork(ctx, netB); !strings.Contains(res, "no longer needed") {
		t.Errorf("second removal: %q", res)
	}

	// An owned parent that vanished is re-created; a user's link is not
	// touched.
	f.k.Remove("eth0.10")
	if res, err := f.d.RecreateParent(ctx, "eth0.10"); err != nil || res != "re-created eth0.10" {
		t.Errorf("RecreateParent: %q, %v", res, err)
	}
	if res, err := f.d.RecreateParent(ctx, "eth1"); err != nil || !strings.Contains(res, "no longer needed") {
		t.Errorf("RecreateParent(eth1), the user's link: %q, %v", res, err)
	}

	// Orphans: only marked links no record owns.
	f.k.AddLink(kernel.Link{Name: "uleffffffffffff", Kind: "macvlan", Alias: f.d.mark})
	f.k.AddLink(kernel.Link{Name: "ulh000000000000", Kind: "macvlan", Alias: "underlay:someone-else"})
	if res, err := f.d.DeleteOrphanLink(ctx, "uleffffffffffff"); err != nil || res != "deleted uleffffffffffff" {
		t.Errorf("DeleteOrphanLink: %q, %v", res, err)
	}
	if _, err := f.d.DeleteOrphanLink(ctx, "ulh000000000000"); !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), "does not carry this underlay's mark") {
		t.Errorf("foreign link: %v", err)
	}
	if _, ok := f.k.Link(link); !ok { // in the container: put one back in the host namespace
		f.k.AddLink(kernel.Link{Name: link, Kind: "macvlan", Alias: f.d.mark})
	}
	if res, err := f.d.DeleteOrphanLink(ctx, link); err != nil || !strings.Contains(res, "a record owns link") {
		t.Errorf("recorded endpoint link: %q, %v", res, err)
	}
	if _, ok := f.k.Link(link); !ok {
		t.Errorf("the recorded endpoint link %s was deleted", link)
	}

	// An expired reservation is rolled back, an unexpired one is not.
	if err := f.db.Update(func(tx *store.Tx) error {
		n, _, err := tx.Network(netA)
		n.Pending = &record.Reservation{Token: "t", Deadline: f.clock.Now().Add(time.Second)}
		if err == nil {
			err = tx.PutNetwork(n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.RollbackExpired(ctx, netA); err == nil || !strings.Contains(err.Error(), "has not expired") {
		t.Errorf("unexpired: %v", err)
	}
	f.clock.Advance(2 * time.Second)
	if res, err := f.d.RollbackExpired(ctx, netA); err != nil || !strings.Contains(res, "rolled back network aaaaaaaaaaaa") {
		t.Errorf("expired: %q, %v", res, err)
	}
	f.wantNetworks()
}

// The host link of a network being created (made before its record is
// committed, under its parent's lock) is no orphan: the repair waits for
// the lock and then finds the record.
func TestOrphanRepairWaitsForACreate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	result := make(chan string, 1)
	f.close()
	f.open()
	var once bool
	f.d.crash = func(p string) {
		if p != "create-network/before-commit" || once {
			return
		}
		once = true
		go func() {
			res, err := f.d.DeleteOrphanLink(ctx, config.ShimName(netA))
			if err != nil {
				res = err.Error()
			}
			result <- res
		}()
		time.Sleep(100 * time.Millisecond) // the repair now waits for eth0's lock
	}
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	if res := <-result; !strings.Contains(res, "a record owns link") {
		t.Errorf("repair during the create: %q", res)
	}
	if _, ok := f.k.Link(config.ShimName(netA)); !ok {
		t.Fatal("the repair deleted the host link of a network being created")
	}
}
