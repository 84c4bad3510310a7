package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// TestMigrateFromSchema2 opens a file as schema 2 wrote it (no IPAM
// buckets) and finds it migrated: the IPAM buckets exist and work, the old
// records are intact.
func TestMigrateFromSchema2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		for v := 0; v < 2; v++ {
			if err := migrations[v](tx); err != nil {
				return err
			}
		}
		// Records as schema 2 wrote them (the layout of schema 3).
		if err := putV3Network(tx, network("n1", "eth0.10")); err != nil {
			return err
		}
		if err := putV3Endpoint(tx, record.Endpoint{NetworkID: "n1", ID: "e1", Link: "ule1"}); err != nil {
			return err
		}
		stx := &Tx{tx: tx}
		if err := stx.PutParentLink(record.ParentLink{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Put(keyInstance, []byte("inst2")); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("2"))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	defer db.Close()
	if db.InstanceID() != "inst2" {
		t.Fatalf("instance ID %q after migration", db.InstanceID())
	}
	mustView(t, db, func(tx *Tx) error {
		for _, b := range [][]byte{bucketIPAMPools, bucketIPAMAddrs} {
			if tx.tx.Bucket(b) == nil {
				return fmt.Errorf("bucket %s missing after migration", b)
			}
		}
		if v := string(tx.tx.Bucket(bucketMeta).Get(keySchema)); v != fmt.Sprint(SchemaVersion) {
			return fmt.Errorf("schema %s after migration", v)
		}
		if n, ok, err := tx.Network("n1"); err != nil || !ok || n.Parent != "eth0.10" || n.IPv4[0].Subnet != "198.18.1.0/24" {
			return fmt.Errorf("network after migration: %+v %v %v", n, ok, err)
		}
		if ep, ok, err := tx.EndpointByLink("ule1"); err != nil || !ok || ep.ID != "e1" {
			return fmt.Errorf("endpoint after migration: %+v %v %v", ep, ok, err)
		}
		if got := tx.ParentLinksOn("eth0"); len(got) != 1 || got[0] != "eth0.10" {
			return fmt.Errorf("ParentLinksOn(eth0) = %v", got)
		}
		if pools, err := tx.IPAMPools(); err != nil || len(pools) != 0 {
			return fmt.Errorf("IPAM pools after migration: %v %v", pools, err)
		}
		return nil
	})
	mustUpdate(t, db, func(tx *Tx) error {
		if err := tx.PutIPAMPool(IPAMPool{ID: "p1", Space: "s", Prefix: "10.0.0.0/24"}); err != nil {
			return err
		}
		return tx.PutIPAMAddress("p1", "10.0.0.1")
	})
	db.Close()

	// Opening a schema 3 file again migrates nothing and keeps it all.
	db = open(t, path)
	defer db.Close()
	mustView(t, db, func(tx *Tx) error {
		if !tx.IPAMAddressUsed("p1", "10.0.0.1") {
			return errors.New("IPAM address lost at reopen")
		}
		if _, ok, _ := tx.Network("n1"); !ok {
			return errors.New("network lost at reopen")
		}
		return nil
	})
}

func TestIPAMRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db := open(t, path)
	deadline := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	pending := IPAMPool{ID: "p1", Space: "local", Prefix: "10.0.0.0/24", Auto: true, Pending: &record.Reservation{Token: "p1", Deadline: deadline}}
	other := IPAMPool{ID: "p2", Space: "local", Prefix: "10.0.1.0/24", Auto: true, Pending: &record.Reservation{Token: "p2", Deadline: deadline}}
	explicit := IPAMPool{ID: "p3", Space: "global", Prefix: "10.0.0.0/24", Parent: "eth0", Gateway: "10.0.0.254", Range: "10.0.0.128/25"}
	mustUpdate(t, db, func(tx *Tx) error {
		for _, p := range []IPAMPool{pending, other, explicit} {
			if err := tx.PutIPAMPool(p); err != nil {
				return err
			}
		}
		for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			if err := tx.PutIPAMAddress("p1", a); err != nil {
				return err
			}
		}
		return tx.PutIPAMAddress("p3", "10.0.0.1")
	})
	db.Close()
	db = open(t, path)
	defer db.Close()

	mustView(t, db, func(tx *Tx) error {
		pools, err := tx.IPAMPools()
		if err != nil || len(pools) != 3 || pools[0].ID != "p1" || pools[2].Gateway != "10.0.0.254" || pools[2].Range != "10.0.0.128/25" {
			return fmt.Errorf("IPAMPools = %+v, %v", pools, err)
		}
		p, ok, err := tx.IPAMPool("p1")
		if err != nil || !ok || p.Pending == nil || !p.Pending.Deadline.Equal(deadline) {
			return fmt.Errorf("IPAMPool(p1) = %+v %v %v", p, ok, err)
		}
		if _, ok, _ := tx.IPAMPool("nope"); ok {
			return errors.New("unknown pool found")
		}
		got := tx.IPAMAddresses("p1")
		sort.Strings(got)
		if fmt.Sprint(got) != "[10.0.0.1 10.0.0.2 10.0.0.3]" {
			return fmt.Errorf("IPAMAddresses(p1) = %v", got)
		}
		if !tx.IPAMAddressUsed("p3", "10.0.0.1") || tx.IPAMAddressUsed("p3", "10.0.0.2") || tx.IPAMAddressUsed("nope", "10.0.0.1") {
			return errors.New("IPAMAddressUsed wrong")
		}
		return nil
	})

	// Expired: from the deadline on.
	if pending.Expired(deadline.Add(-time.Nanosecond)) || !pending.Expired(deadline) || explicit.Expired(deadline.Add(time.Hour)) {
		t.Fatal("Expired wrong")
	}

	// Confirm: only pending pools of that prefix, in canonical form.
	mustUpdate(t, db, func(tx *Tx) error { return tx.ConfirmIPAMPools("local", "10.0.0.9/24") })
	mustView(t, db, func(tx *Tx) error {
		p1, _, _ := tx.IPAMPool("p1")
		p2, _, _ := tx.IPAMPool("p2")
		p3, _, _ := tx.IPAMPool("p3")
		if p1.Pending != nil || p2.Pending == nil || p3.Pending != nil || p3.Gateway != "10.0.0.254" {
			return fmt.Errorf("after confirm: %+v %+v %+v", p1, p2, p3)
		}
		return nil
	})
	mustUpdate(t, db, func(tx *Tx) error { return tx.ConfirmIPAMPools("local", "not a prefix") })

	// Release an address, the last one, one never handed out, of an
	// unknown pool: none is an error.
	mustUpdate(t, db, func(tx *Tx) error {
		for _, r := range [][2]string{{"p1", "10.0.0.2"}, {"p3", "10.0.0.1"}, {"p1", "10.0.0.99"}, {"nope", "10.0.0.1"}} {
			if err := tx.DeleteIPAMAddress(r[0], r[1]); err != nil {
				return fmt.Errorf("DeleteIPAMAddress%v: %w", r, err)
			}
		}
		return nil
	})
	mustView(t, db, func(tx *Tx) error {
		if got := tx.IPAMAddresses("p1"); len(got) != 2 || tx.IPAMAddressUsed("p1", "10.0.0.2") {
			return fmt.Errorf("after release: %v", got)
		}
		if got := tx.IPAMAddresses("p3"); len(got) != 0 {
			return fmt.Errorf("after releasing the last: %v", got)
		}
		return nil
	})
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutIPAMAddress("p3", "10.0.0.1") })

	// Deleting a pool drops its addresses; deleting it again, or an
	// unknown one, is fine.
	mustUpdate(t, db, func(tx *Tx) error {
		for _, id := range []string{"p1", "p1", "nope"} {
			if err := tx.DeleteIPAMPool(id); err != nil {
				return err
			}
		}
		return nil
	})
	mustView(t, db, func(tx *Tx) error {
		if _, ok, _ := tx.IPAMPool("p1"); ok || len(tx.IPAMAddresses("p1")) != 0 || tx.IPAMAddressUsed("p1", "10.0.0.1") {
			return errors.New("deleted pool or its addresses survived")
		}
		if !tx.IPAMAddressUsed("p3", "10.0.0.1") {
			return errors.New("another pool's address was deleted")
		}
		return nil
	})
}

func TestIPAMPoolCorruptRecord(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error { return tx.tx.Bucket(bucketIPAMPools).Put([]byte("bad"), []byte("{not json")) })
	err := db.View(func(tx *Tx) error { _, err := tx.IPAMPools(); return err })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("IPAMPools over a corrupt record: %v", err)
	}
	err = db.View(func(tx *Tx) error { _, _, err := tx.IPAMPool("bad"); return err })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("IPAMPool of a corrupt record: %v", err)
	}
	err = db.Update(func(tx *Tx) error { return tx.ConfirmIPAMPools("local", "10.0.0.0/24") })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ConfirmIPAMPools over a corrupt record: %v", err)
	}
}

// An IPAM lease is the value of its allocated address: read back across a
// reopen, seen as allocated, gone with the address, and a plain address
// has none.
func TestIPAMLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db := open(t, path)
	l := IPAMLease{Name: "web", MAC: "52:31:86:b0:b1:32", Hostname: "web", Lease: &record.Lease{Addr: "198.18.180.120/24", ServerID: "198.18.180.1"}}
	mustUpdate(t, db, func(tx *Tx) error {
		if err := tx.PutIPAMPool(IPAMPool{ID: "p", Space: "local", Prefix: "198.18.180.0/24", Parent: "eth0", DHCP: true}); err != nil {
			return err
		}
		if err := tx.PutIPAMAddress("p", "198.18.180.1"); err != nil {
			return err
		}
		return tx.PutIPAMLease("p", "198.18.180.120", l)
	})
	db.Close()
	db = open(t, path)
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error {
		got, ok, err := tx.IPAMLease("p", "198.18.180.120")
		if err != nil || !ok || got.MAC != l.MAC || got.Name != "web" || got.Lease.Addr != l.Lease.Addr {
			return fmt.Errorf("IPAMLease = %+v %v %v", got, ok, err)
		}
		if !tx.IPAMAddressUsed("p", "198.18.180.120") {
			return errors.New("a leased address is not allocated")
		}
		if _, ok, err := tx.IPAMLease("p", "198.18.180.1"); ok || err != nil {
			return fmt.Errorf("the gateway (no lease) has one: %v %v", ok, err)
		}
		if p, _, _ := tx.IPAMPool("p"); !p.DHCP {
			return errors.New("the pool's dhcp flag is lost")
		}
		return tx.DeleteIPAMAddress("p", "198.18.180.120")
	})
	mustView(t, db, func(tx *Tx) error {
		if _, ok, _ := tx.IPAMLease("p", "198.18.180.120"); ok || tx.IPAMAddressUsed("p", "198.18.180.120") {
			return errors.New("a freed address keeps its lease")
		}
		return nil
	})
}
