package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// TestMigrateFromSchema1 opens a file as schema 1 wrote it (no index of
// parent links by base) and finds it migrated, index built, in one step.
func TestMigrateFromSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		if err := migrations[0](tx); err != nil {
			return err
		}
		for _, p := range []record.ParentLink{{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10}, {Name: "eth0.10.20", Kind: "vlan", Base: "eth0.10", VLAN: 20}, {Name: "uli1", Kind: "dummy"}} {
			b, _ := json.Marshal(p)
			if err := tx.Bucket(bucketParentLinks).Put([]byte(p.Name), b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("1"))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	defer db.Close()
	mustView(t, db, func(tx *Tx) error {
		if got := tx.ParentLinksOn("eth0"); len(got) != 1 || got[0] != "eth0.10" {
			return fmt.Errorf("ParentLinksOn(eth0) = %v", got)
		}
		if got := tx.ParentLinksOn("eth0.10"); len(got) != 1 || got[0] != "eth0.10.20" {
			return fmt.Errorf("ParentLinksOn(eth0.10) = %v", got)
		}
		if v := string(tx.tx.Bucket(bucketMeta).Get(keySchema)); v != fmt.Sprint(SchemaVersion) {
			return fmt.Errorf("schema %s after migration", v)
		}
		return nil
	})
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteParentLink("eth0.10.20") })
	mustView(t, db, func(tx *Tx) error {
		if got := tx.ParentLinksOn("eth0.10"); len(got) != 0 {
			return fmt.Errorf("index kept a deleted link: %v", got)
		}
		return nil
	})
}

// TestMigrateFromSchema3 opens a file as schema 3 wrote it and reads back
// every record the same, through every index, in the compact layout.
func TestMigrateFromSchema3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	nets, eps := v3State()
	writeV3(t, path, nets, eps, func(tx *bolt.Tx) error {
		stx := &Tx{tx: tx}
		if err := stx.PutParentLink(record.ParentLink{Name: "uli1", Kind: "dummy"}); err != nil {
			return err
		}
		if err := stx.PutIPAMPool(IPAMPool{ID: "p1", Space: "s", Prefix: "10.0.0.0/8"}); err != nil {
			return err
		}
		return stx.PutIPAMAddress("p1", "10.0.0.2")
	})
	db := open(t, path)
	defer db.Close()
	if db.InstanceID() != "inst3" {
		t.Fatalf("instance ID %q after migration", db.InstanceID())
	}
	mustView(t, db, func(tx *Tx) error {
		if v := string(tx.tx.Bucket(bucketMeta).Get(keySchema)); v != fmt.Sprint(SchemaVersion) {
			return fmt.Errorf("schema %s after migration", v)
		}
		for _, b := range [][]byte{v3Networks, v3ByParent, v3Pending, v3Endpoints, v3Links} {
			if tx.tx.Bucket(b) != nil {
				return fmt.Errorf("schema 3 bucket %s left behind", b)
			}
		}
		return checkState(tx, nets, eps)
	})
	mustView(t, db, func(tx *Tx) error {
		c, err := tx.Counts()
		if want := (Counts{Networks: 3, Endpoints: 5, ParentLinks: 1, EndpointLinks: 5, HostLinks: 1}); err != nil || c != want {
			return fmt.Errorf("counts %+v %v, want %+v", c, err, want)
		}
		if pl, ok, err := tx.ParentLink("uli1"); err != nil || !ok || pl.Kind != "dummy" {
			return fmt.Errorf("parent link after migration: %+v %v %v", pl, ok, err)
		}
		if p, ok, err := tx.IPAMPool("p1"); err != nil || !ok || p.Prefix != "10.0.0.0/8" || !tx.IPAMAddressUsed("p1", "10.0.0.2") {
			return fmt.Errorf("IPAM after migration: %+v %v %v", p, ok, err)
		}
		return nil
	})

	// The migrated records are written and deleted like new ones.
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork(nets[0].ID) })
	mustUpdate(t, db, func(tx *Tx) error {
		if err := tx.PutNetwork(network("n4", "eth0")); err != nil {
			return err
		}
		return tx.PutEndpoint(record.Endpoint{NetworkID: "n4", ID: "e4", Link: eps[0].Link})
	})
	mustView(t, db, func(tx *Tx) error {
		if got, err := tx.Endpoints(nets[0].ID); err != nil || len(got) != 0 {
			return fmt.Errorf("endpoints of a deleted network: %+v %v", got, err)
		}
		ep, ok, err := tx.EndpointByLink(eps[0].Link)
		if err != nil || !ok || ep.NetworkID != "n4" || ep.ID != "e4" {
			return fmt.Errorf("link reused after its network was deleted: %+v %v %v", ep, ok, err)
		}
		if on, err := tx.NetworksOn("eth0"); err != nil || len(on) != 2 || on[0].ID != nets[1].ID || on[1].ID != "n4" {
			return fmt.Errorf("NetworksOn(eth0) = %+v, %v", on, err)
		}
		return nil
	})
}

// checkState compares everything the Tx reads with the records written.
func checkState(tx *Tx, nets []record.Network, eps []record.Endpoint) error {
	for _, n := range nets {
		got, ok, err := tx.Network(n.ID)
		if err != nil || !ok || !reflect.DeepEqual(got, n) {
			return fmt.Errorf("network %s: got %+v %v %v, want %+v", n.ID, got, ok, err, n)
		}
		var want []record.Endpoint
		for _, ep := range eps {
			if ep.NetworkID == n.ID {
				want = append(want, ep)
			}
		}
		if got, err := tx.Endpoints(n.ID); err != nil || !reflect.DeepEqual(got, want) {
			return fmt.Errorf("endpoints of %s: got %+v %v, want %+v", n.ID, got, err, want)
		}
	}
	for _, ep := range eps {
		got, ok, err := tx.Endpoint(ep.NetworkID, ep.ID)
		if err != nil || !ok || !reflect.DeepEqual(got, ep) {
			return fmt.Errorf("endpoint %s: got %+v %v %v, want %+v", ep.ID, got, ok, err, ep)
		}
		if got, ok, err = tx.EndpointByLink(ep.Link); err != nil || !ok || !reflect.DeepEqual(got, ep) {
			return fmt.Errorf("endpoint of link %s: got %+v %v %v, want %+v", ep.Link, got, ok, err, ep)
		}
		for _, a := range endpointAddrs(ep) {
			if ids, err := tx.EndpointsWithAddr(ep.NetworkID, a); err != nil || !reflect.DeepEqual(ids, []string{ep.ID}) {
				return fmt.Errorf("endpoints of network %s with address %s: %v %v, want [%s]", ep.NetworkID, a, ids, err, ep.ID)
			}
		}
	}
	var all []string
	if err := tx.ForEachNetwork(func(n record.Network) error { all = append(all, n.ID); return nil }); err != nil || len(all) != len(nets) {
		return fmt.Errorf("ForEachNetwork: %v %v", all, err)
	}
	var shims []string
	if err := tx.ForEachNetworkWithHostAddress(func(n record.Network) error { shims = append(shims, n.ID); return nil }); err != nil || len(shims) != 1 || shims[0] != nets[0].ID {
		return fmt.Errorf("ForEachNetworkWithHostAddress: %v %v", shims, err)
	}
	if on, err := tx.NetworksOn("eth0"); err != nil || len(on) != 2 || on[0].ID != nets[0].ID || on[1].ID != nets[1].ID {
		return fmt.Errorf("NetworksOn(eth0) = %+v, %v", on, err)
	}
	if p, err := tx.Pending(); err != nil || len(p) != 1 || !reflect.DeepEqual(p[0], nets[1]) {
		return fmt.Errorf("Pending = %+v, %v", p, err)
	}
	if use := tx.ParentUse(); !reflect.DeepEqual(use, map[string]int{"eth0": 2, "uli1": 1}) {
		return fmt.Errorf("ParentUse = %v", use)
	}
	if !tx.ParentInUse("uli1") || tx.ParentInUse("eth1") {
		return errors.New("ParentInUse wrong")
	}
	return nil
}

// TestFailedMigrationChangesNothing: a schema 3 record that does not
// decode, or two endpoints with one link, fail the migration, naming them,
// and leave the file as it was.
func TestFailedMigrationChangesNothing(t *testing.T) {
	for name, c := range map[string]struct {
		damage func(*bolt.Tx) error
		want   string
	}{
		"broken record": {func(tx *bolt.Tx) error {
			return tx.Bucket(v3Endpoints).Bucket([]byte("net-text")).Put([]byte("broken"), []byte("{not json"))
		}, `"broken"`},
		"link twice": {func(tx *bolt.Tx) error {
			return putV3Endpoint(tx, record.Endpoint{NetworkID: "net-text", ID: "e2", Link: "ule1"})
		}, "e1 of network net-text and e2 of network net-text have the same link ule1"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "v3.db")
			nets, eps := v3State()
			writeV3(t, path, nets, eps, c.damage)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(path, Options{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "schema 3 to 4") {
				t.Fatalf("open: %v, want ErrCorrupt naming %s", err, c.want)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("the failed migration changed the file")
			}
		})
	}
}

// TestMigratedFileIsCompacted: the pages of the old layout do not stay in
// the file; the compacted file is the one at the path, locked, and a
// half-written copy a crash left is removed.
func TestMigratedFileIsCompacted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	nets, eps := v3File(t, path)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	defer db.Close()
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size()*2 > before.Size() {
		t.Errorf("file of %d bytes is %d after the migration, want less than half", before.Size(), after.Size())
	}
	if _, err := os.Stat(compactPath(path)); !os.IsNotExist(err) {
		t.Errorf("the copy is left behind: %v", err)
	}
	if db.Path() != path {
		t.Errorf("Path() = %s, want %s", db.Path(), path)
	}
	mustView(t, db, func(tx *Tx) error { return checkMany(tx, nets, eps) })
	if _, err := Open(path, Options{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of the compacted file: %v, want ErrLocked", err)
	}
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork(nets[0].ID) })
	db.Close()

	if err := os.WriteFile(compactPath(path), []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	if _, err := os.Stat(compactPath(path)); !os.IsNotExist(err) {
		t.Errorf("a copy a crash left is kept: %v", err)
	}
	mustView(t, db, func(tx *Tx) error { return checkMany(tx, nets[1:], eps[10:]) })
}

// checkMany reads every network and endpoint back.
func checkMany(tx *Tx, nets []record.Network, eps []record.Endpoint) error {
	for _, n := range nets {
		if got, ok, err := tx.Network(n.ID); err != nil || !ok || !reflect.DeepEqual(got, n) {
			return fmt.Errorf("network %s: %+v %v %v", n.ID, got, ok, err)
		}
	}
	for _, ep := range eps {
		if got, ok, err := tx.EndpointByLink(ep.Link); err != nil || !ok || !reflect.DeepEqual(got, ep) {
			return fmt.Errorf("endpoint of link %s: %+v %v %v", ep.Link, got, ok, err)
		}
	}
	c, err := tx.Counts()
	if err != nil || c.Networks != len(nets) || c.Endpoints != len(eps) {
		return fmt.Errorf("counts %+v %v", c, err)
	}
	return nil
}
