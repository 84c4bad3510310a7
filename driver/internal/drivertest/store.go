package drivertest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Store opens a state file of its own in t's temporary directory, closed
// when t ends: the real store the internal packages' tests write to.
func Store(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "underlay.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Put commits records to db: networks before endpoints, as the store
// requires.
func Put(t testing.TB, db *store.DB, networks []record.Network, endpoints ...record.Endpoint) {
	t.Helper()
	if err := db.Update(func(tx *store.Tx) error {
		for _, n := range networks {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for _, ep := range endpoints {
			if err := tx.PutEndpoint(ep); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
