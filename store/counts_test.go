package store

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
)

func TestCountsAndCommitObserver(t *testing.T) {
	var mu sync.Mutex
	var commits []time.Duration
	db, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{ObserveCommit: func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		commits = append(commits, d)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	observed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(commits)
	}

	var c Counts
	mustView(t, db, func(tx *Tx) (err error) { c, err = tx.Counts(); return err })
	if c != (Counts{}) {
		t.Fatalf("empty state counts %+v", c)
	}
	if observed() != 0 {
		t.Fatalf("%d commits observed before any write", observed())
	}

	shim := network("n2", "eth1")
	shim.HostAddress = "198.18.1.2"
	pendingShim := network("n3", "eth1.5")
	pendingShim.HostAddress = "198.18.1.3"
	pendingShim.Pending = &record.Reservation{Token: "t", Deadline: time.Now().Add(time.Minute)}
	mustUpdate(t, db, func(tx *Tx) error {
		for _, n := range []record.Network{network("n1", "eth0"), shim, pendingShim} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for _, ep := range []record.Endpoint{{NetworkID: "n1", ID: "e1", Link: "ule1"}, {NetworkID: "n1", ID: "e2", Link: "ule2"}, {NetworkID: "n2", ID: "e3", Link: "ule3"}} {
			if err := tx.PutEndpoint(ep); err != nil {
				return err
			}
		}
		return tx.PutParentLink(record.ParentLink{Name: "eth1.5", Kind: "vlan", Base: "eth1", VLAN: 5})
	})
	if err := db.Batch(func(tx *Tx) error { return tx.DeleteEndpoint("n1", "e2") }); err != nil {
		t.Fatal(err)
	}
	// A write that fails commits nothing and is not observed.
	if err := db.Batch(func(tx *Tx) error { return errors.New("refused") }); err == nil {
		t.Fatal("a failing Batch succeeded")
	}
	if err := db.Update(func(tx *Tx) error { return errors.New("refused") }); err == nil {
		t.Fatal("a failing Update succeeded")
	}
	mustView(t, db, func(tx *Tx) (err error) { c, err = tx.Counts(); return err })
	want := Counts{Networks: 3, Endpoints: 2, ParentLinks: 1, EndpointLinks: 2, HostLinks: 1}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if n := observed(); n != 2 {
		t.Fatalf("%d commits observed, want 2 (one Update, one Batch)", n)
	}
}
