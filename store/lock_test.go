package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestOpenWaitingOnAReplacedFileReopens: an Open that waited for the lock
// of a file which, meanwhile, a compaction's copy replaced (the waiting
// Open holds the old one, no longer at the path) must not use the old
// file (its writes would vanish, and comparing its pages with the new
// file's size called a sound file truncated): it opens the file at the
// path.
func TestOpenWaitingOnAReplacedFileReopens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.db")
	holder := open(t, path)
	mustUpdate(t, holder, func(tx *Tx) error { return tx.PutNetwork(network("old", "eth0")) })

	type result struct {
		db  *DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		db, err := Open(path, Options{LockTimeout: 20 * time.Second})
		done <- result{db, err}
	}()
	// Wait until the second Open holds the old file (its lock wait).
	for deadline := time.Now().Add(10 * time.Second); openCount(t, path) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second Open never opened the file")
		}
	}
	other := filepath.Join(dir, "other.db")
	replacement := open(t, other)
	mustUpdate(t, replacement, func(tx *Tx) error { return tx.PutNetwork(network("new", "eth0")) })
	if err := replacement.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	holder.Close()

	r := <-done
	if r.err != nil {
		t.Fatalf("open after the file was replaced: %v", r.err)
	}
	defer r.db.Close()
	mustView(t, r.db, func(tx *Tx) error {
		if _, ok, err := tx.Network("new"); err != nil || !ok {
			return fmt.Errorf("the Open uses the file the path no longer names (network of the new file: %v %v)", ok, err)
		}
		return nil
	})
}

// openCount is how many of this process's descriptors have path open.
func openCount(t *testing.T, path string) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n, real := 0, realPath(path)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && (target == path || target == real) {
			n++
		}
	}
	return n
}
