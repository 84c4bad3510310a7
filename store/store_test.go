package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

func open(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func network(id, parent string) record.Network {
	return record.Network{ID: id, Type: "macvlan", Parent: parent, Mode: "bridge", IPv4: []record.Pool{{Subnet: "198.18.1.0/24", Gateway: "198.18.1.1"}}}
}

func TestReopenKeepsRecordsAndIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "state.db")
	db := open(t, path)
	pending := network("n2", "eth0")
	pending.Pending = &record.Reservation{Token: "t", Deadline: time.Unix(100, 0).UTC()}
	err := db.Update(func(tx *Tx) error {
		for _, n := range []record.Network{network("n1", "eth0"), pending, network("n3", "eth1")} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		if err := tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: "e1", Link: "ule1", MAC: "02:00:00:00:00:01"}); err != nil {
			return err
		}
		return tx.PutParentLink(record.ParentLink{Name: "eth1", Kind: "vlan", Base: "eth9", VLAN: 9})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(t, path)
	defer db.Close()
	err = db.View(func(tx *Tx) error {
		on, err := tx.NetworksOn("eth0")
		if err != nil || len(on) != 2 || on[0].ID != "n1" || on[1].ID != "n2" {
			return fmt.Errorf("NetworksOn(eth0) = %+v, %v", on, err)
		}
		p, err := tx.Pending()
		if err != nil || len(p) != 1 || p[0].ID != "n2" || !p[0].Pending.Deadline.Equal(time.Unix(100, 0)) {
			return fmt.Errorf("Pending = %+v, %v", p, err)
		}
		ep, ok, err := tx.EndpointByLink("ule1")
		if err != nil || !ok || ep.ID != "e1" || ep.MAC != "02:00:00:00:00:01" {
			return fmt.Errorf("EndpointByLink = %+v %v %v", ep, ok, err)
		}
		pl, ok, err := tx.ParentLink("eth1")
		if err != nil || !ok || pl.VLAN != 9 {
			return fmt.Errorf("ParentLink = %+v %v %v", pl, ok, err)
		}
		if !tx.ParentInUse("eth1") || tx.ParentInUse("eth5") {
			return errors.New("ParentInUse wrong")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPutNetworkMovesIndexesAndCommitClearsPending(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	n := network("n1", "eth0")
	n.Pending = &record.Reservation{Token: "t"}
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(n) })
	n.Parent, n.Pending = "eth1", nil
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(n) })
	mustView(t, db, func(tx *Tx) error {
		if tx.ParentInUse("eth0") || !tx.ParentInUse("eth1") {
			return errors.New("parent index not moved")
		}
		if p, _ := tx.Pending(); len(p) != 0 {
			return fmt.Errorf("pending after commit: %+v", p)
		}
		return nil
	})
}

func TestDeleteNetworkRemovesEndpointsAndIndexes(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error {
		if err := tx.PutNetwork(network("n1", "eth0")); err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if err := tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: fmt.Sprint("e", i), Link: fmt.Sprint("ule", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork("n1") })
	mustView(t, db, func(tx *Tx) error {
		if _, ok, _ := tx.EndpointByLink("ule1"); ok {
			return errors.New("link index survived")
		}
		if eps, _ := tx.Endpoints("n1"); len(eps) != 0 {
			return errors.New("endpoints survived")
		}
		if tx.ParentInUse("eth0") {
			return errors.New("parent index survived")
		}
		return nil
	})
	// Deleting again, or an unknown network, is fine.
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork("n1") })
}

func TestPutEndpointChecks(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	err := db.Update(func(tx *Tx) error { return tx.PutEndpoint(record.Endpoint{NetworkID: "nope", ID: "e", Link: "l"}) })
	if !errors.Is(err, ErrNoNetwork) {
		t.Fatalf("endpoint of a missing network: %v", err)
	}
	mustUpdate(t, db, func(tx *Tx) error {
		if err := tx.PutNetwork(network("n1", "eth0")); err != nil {
			return err
		}
		return tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: "e1", Link: "ule1"})
	})
	err = db.Update(func(tx *Tx) error { return tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: "e2", Link: "ule1"}) })
	if err == nil {
		t.Fatal("two endpoints got the same link name")
	}
}

func TestSecondOpenTimesOutNamingTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db := open(t, path)
	defer db.Close()
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name the file", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("second open hung")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	open(t, path).Close()
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, _ := os.ReadFile(path)
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "99") || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of a schema 99 file: %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("the refused file was modified")
	}
}

func TestForeignBoltFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err }); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := Open(path, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of another program's bbolt file: %v, want ErrCorrupt", err)
	}
}

func TestCorruptAndTruncatedFilesRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	db := open(t, good)
	mustUpdate(t, db, func(tx *Tx) error {
		for i := 0; i < 500; i++ {
			if err := tx.PutNetwork(network(fmt.Sprintf("net%04d", i), "eth0")); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	content, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"garbage":         []byte("this is not a database at all, not even close to one"),
		"zeroed-meta":     append(make([]byte, 8192), content[8192:]...),
		"truncated-half":  content[:len(content)/2],
		"truncated-pages": content[:3*4096],
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".db")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := Open(path, Options{})
			if err == nil {
				db.Close()
				t.Fatal("opened a damaged file")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it aside") {
				t.Fatalf("error %q: want ErrCorrupt naming the file and the fix", err)
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(data) {
				t.Fatal("the damaged file was rewritten")
			}
		})
	}
}

func TestBatchSharesCommitsAndIsolatesFailures(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(network("n1", "eth0")) })
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			netID := "n1"
			if i%10 == 0 {
				netID = "missing" // fails alone
			}
			errs[i] = db.Batch(func(tx *Tx) error {
				return tx.PutEndpoint(record.Endpoint{NetworkID: netID, ID: fmt.Sprint("e", i), Link: fmt.Sprint("l", i)})
			})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if (i%10 == 0) != errors.Is(err, ErrNoNetwork) {
			t.Fatalf("batch call %d: %v", i, err)
		}
	}
	mustView(t, db, func(tx *Tx) error {
		eps, err := tx.Endpoints("n1")
		if len(eps) != 180 {
			return fmt.Errorf("%d endpoints stored, want 180 (%v)", len(eps), err)
		}
		return nil
	})
}

func TestBatchAfterCloseFails(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	db.Close()
	if err := db.Batch(func(*Tx) error { return nil }); err == nil {
		t.Fatal("batch after close succeeded")
	}
}

func mustUpdate(t *testing.T, db *DB, fn func(*Tx) error) {
	t.Helper()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func mustView(t *testing.T, db *DB, fn func(*Tx) error) {
	t.Helper()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}

// TestCrashBetweenReserveAndCommit kills a process (SIGKILL, no Close)
// after it committed a reservation and before the network was complete:
// the reservation is found at the next open, with everything committed
// before it and nothing of the commit that never happened.
func TestCrashBetweenReserveAndCommit(t *testing.T) {
	if path := os.Getenv("STORE_CRASH_HELPER"); path != "" {
		db, err := Open(path, Options{})
		if err != nil {
			os.Exit(3)
		}
		_ = db.Update(func(tx *Tx) error { return tx.PutNetwork(network("done", "eth0")) })
		n := network("half", "eth1")
		n.Pending = &record.Reservation{Token: "tok", Deadline: time.Now().Add(time.Minute)}
		_ = db.Update(func(tx *Tx) error { return tx.PutNetwork(n) })
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	path := filepath.Join(t.TempDir(), "s.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBetweenReserveAndCommit$")
	cmd.Env = append(os.Environ(), "STORE_CRASH_HELPER="+path)
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die by SIGKILL: %v", err)
	}
	db := open(t, path)
	defer db.Close()
	mustView(t, db, func(tx *Tx) error {
		p, err := tx.Pending()
		if err != nil || len(p) != 1 || p[0].ID != "half" || p[0].Pending.Token != "tok" {
			return fmt.Errorf("pending after crash: %+v %v", p, err)
		}
		if _, ok, _ := tx.Network("done"); !ok {
			return errors.New("network committed before the crash is lost")
		}
		return nil
	})
}
