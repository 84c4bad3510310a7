package store

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The names bucket: absent in a schema 4 file until the first name is
// written (reads see no names, the schema stays 4), one record per name
// and per address, kept across a reopen, and gone with its last name.
func TestIPAMNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db := open(t, path)
	const space, subnet = "underlay-local", "198.18.5.0/24"
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := db.View(func(tx *Tx) error {
		if tx.b(bucketIPAMNames) != nil {
			t.Errorf("a new file has the names bucket before any name is written")
		}
		all, err := tx.AllIPAMNames()
		if err != nil || len(all) != 0 {
			t.Errorf("names of a file without the bucket: %v, %v", all, err)
		}
		_, ok, err := tx.IPAMName(space, subnet, "web")
		if err != nil || ok {
			t.Errorf("a name of a file without the bucket: %v, %v", ok, err)
		}
		_, ok, err = tx.IPAMNameOf(space, subnet, "198.18.5.2")
		if err != nil || ok {
			t.Errorf("an address of a file without the bucket: %v, %v", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	put := func(name, addr string) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			return tx.PutIPAMName(IPAMName{Space: space, Subnet: subnet, Name: name, Address: addr, Given: now})
		}); err != nil {
			t.Fatalf("put %s -> %s: %v", name, addr, err)
		}
	}
	put("web", "198.18.5.2")
	put("db", "198.18.5.3")
	put("web", "198.18.5.4")   // web moves: .2 is no longer remembered
	put("cache", "198.18.5.3") // .3 goes to cache: db is forgotten
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	defer db.Close()
	if err := db.View(func(tx *Tx) error {
		names, err := tx.IPAMNames(space, subnet)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, n := range names {
			if n.Space != space || n.Subnet != subnet || !n.Given.Equal(now) {
				t.Errorf("record %+v: key or time lost", n)
			}
			got[n.Name] = n.Address
		}
		if len(got) != 2 || got["web"] != "198.18.5.4" || got["cache"] != "198.18.5.3" {
			t.Errorf("names after moves: %v, want web .4 and cache .3", got)
		}
		for addr, want := range map[string]string{"198.18.5.2": "", "198.18.5.3": "cache", "198.18.5.4": "web"} {
			n, ok, err := tx.IPAMNameOf(space, subnet, addr)
			if err != nil || ok != (want != "") || n.Name != want {
				t.Errorf("address %s remembered for %q (%v, %v), want %q", addr, n.Name, ok, err, want)
			}
		}
		var schema int
		schema, err = strconv.Atoi(string(tx.b(bucketMeta).Get(keySchema)))
		if err != nil || schema != SchemaVersion {
			t.Errorf("schema %d (%v) after names were written, want %d unchanged", schema, err, SchemaVersion)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Released, then forgotten: the subnet's bucket goes with its last name.
	if err := db.Update(func(tx *Tx) error {
		n, _, err := tx.IPAMName(space, subnet, "web")
		if err != nil {
			return err
		}
		n.Released = now.Add(time.Hour)
		if err := tx.PutIPAMName(n); err != nil {
			return err
		}
		if got, _, _ := tx.IPAMName(space, subnet, "web"); !got.LastUsed().Equal(now.Add(time.Hour)) {
			t.Errorf("last used %s, want the release %s", got.LastUsed(), now.Add(time.Hour))
		}
		if err := tx.DeleteIPAMName(space, subnet, "web"); err != nil {
			return err
		}
		if err := tx.DeleteIPAMName(space, subnet, "cache"); err != nil {
			return err
		}
		if err := tx.DeleteIPAMName(space, subnet, "nosuch"); err != nil {
			return err
		}
		if tx.b(bucketIPAMNames).Bucket(subnetKey(space, subnet)) != nil {
			t.Errorf("the subnet's bucket is left after its last name")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error {
		return tx.PutIPAMName(IPAMName{Space: space, Subnet: subnet, Name: "a\x00b", Address: "198.18.5.9"})
	}); err == nil {
		t.Errorf("a name with a NUL byte was recorded")
	}
}

// A file an underlay of this schema wrote before names existed (no
// bucket) opens and takes names; the bucket is no migration step: the
// schema stays, and a compaction (bolt.Compact, as compactMigrated runs
// it) copies the bucket with the rest.
func TestIPAMNamesSurviveCompaction(t *testing.T) {
	dir := t.TempDir()
	src := open(t, filepath.Join(dir, "a.db"))
	if err := src.Update(func(tx *Tx) error {
		return tx.PutIPAMName(IPAMName{Space: "underlay-local", Subnet: "198.18.6.0/24", Name: "web", Address: "198.18.6.7"})
	}); err != nil {
		t.Fatal(err)
	}
	dst, err := bolt.Open(filepath.Join(dir, "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.Compact(dst, src.bolt, 1<<20); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	db := open(t, filepath.Join(dir, "b.db"))
	defer db.Close()
	if err := db.View(func(tx *Tx) error {
		n, ok, err := tx.IPAMNameOf("underlay-local", "198.18.6.0/24", "198.18.6.7")
		if err != nil || !ok || n.Name != "web" {
			t.Errorf("after compaction: %+v %v %v", n, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
