package driver

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Join and Leave of a network without a host address write nothing to the
// state file (the bytes of the file stay the same); the join is known in
// memory for as long as the daemon runs: a second Join while the link is
// in a sandbox is refused and the inventory shows it joined.
func TestJoinAndLeaveWriteNothingWithoutAHostAddress(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	if _, err := f.endpoint(netA, epA, "198.18.1.10/24", ""); err != nil {
		t.Fatal(err)
	}
	before := f.stateBytes()
	resp, err := f.join(netA, epA)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, f.stateBytes()) {
		t.Fatal("Join wrote to the state file")
	}
	if rec := f.epRecord(netA, epA); rec.Sandbox != "" {
		t.Fatalf("the record carries the join %q", rec.Sandbox)
	}
	if inv := f.inventory(); len(inv.Endpoints) != 1 || inv.Endpoints[0].Sandbox != "/var/run/docker/netns/x" || inv.Endpoints[0].Boot != "boot-1" {
		t.Fatalf("inventory endpoints %+v, want the join from memory", inv.Endpoints)
	}
	link := resp.InterfaceName.SrcName
	f.k.Remove(link) // libnetwork moved it into the sandbox
	_, err = f.join(netA, epA)
	wantErr(t, err, pluginapi.ErrConflict, "already joined", link)
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, f.stateBytes()) {
		t.Fatal("Leave wrote to the state file")
	}
	if inv := f.inventory(); inv.Endpoints[0].Sandbox != "" {
		t.Fatalf("after Leave the inventory still shows the join %q", inv.Endpoints[0].Sandbox)
	}
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("Join after Leave: %v", err)
	}
}

// A network with a host address commits its joins: the host's routes to
// the joined endpoints come back after a restart, and so does the refusal
// of a second Join.
func TestJoinOfAHostAddressNetworkIsCommitted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(withHost(netA, "eth0", "198.18.1.5"))
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	if rec := f.epRecord(netA, epA); rec.Sandbox != "/var/run/docker/netns/x" || rec.Boot != "boot-1" {
		t.Fatalf("record %+v, want the join committed", rec)
	}
	f.k.Remove(link)
	f.restart()
	_, err := f.join(netA, epA)
	wantErr(t, err, pluginapi.ErrConflict, "already joined", link)
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if rec := f.epRecord(netA, epA); rec.Sandbox != "" {
		t.Fatalf("after Leave the record keeps the join %q", rec.Sandbox)
	}
}

// A join an older version committed for a network without a host address
// is honoured and cleared by Leave.
func TestLeaveClearsAJoinAnOlderVersionCommitted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	rec := f.epRecord(netA, epA)
	rec.Sandbox, rec.Boot = "/var/run/docker/netns/old", "boot-1"
	if err := f.db.Update(func(tx *store.Tx) error { return tx.PutEndpoint(rec) }); err != nil {
		t.Fatal(err)
	}
	f.k.Remove(link)
	f.restart()
	_, err := f.join(netA, epA)
	wantErr(t, err, pluginapi.ErrConflict, "already joined", "/var/run/docker/netns/old")
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if rec := f.epRecord(netA, epA); rec.Sandbox != "" {
		t.Fatalf("after Leave the record keeps the join %q", rec.Sandbox)
	}
}

// CreateEndpoint asked again for an existing endpoint writes its record
// anew, without a join: the join in memory goes with it.
func TestCreateEndpointAgainForgetsTheJoin(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.k.Remove(link)
	if _, err := f.endpoint(netA, epA, "198.18.1.10/24", ""); err != nil {
		t.Fatal(err)
	}
	if inv := f.inventory(); inv.Endpoints[0].Sandbox != "" {
		t.Fatalf("the join %q outlived the endpoint's new record", inv.Endpoints[0].Sandbox)
	}
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("Join after CreateEndpoint again: %v", err)
	}
}

func (f *fixture) stateBytes() []byte {
	f.t.Helper()
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) epRecord(netID, epID string) record.Endpoint {
	f.t.Helper()
	var ep record.Endpoint
	if err := f.db.View(func(tx *store.Tx) (err error) {
		var ok bool
		ep, ok, err = tx.Endpoint(netID, epID)
		if err == nil && !ok {
			f.t.Fatalf("no record of endpoint %s", epID)
		}
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return ep
}

func (f *fixture) inventory() doctor.Inventory {
	f.t.Helper()
	inv, err := f.d.Inventory(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return inv
}
