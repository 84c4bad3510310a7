package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// v3File writes a schema 3 file of 300 networks of 10 endpoints at path:
// big enough that its compaction halves it.
func v3File(t *testing.T, path string) ([]record.Network, []record.Endpoint) {
	t.Helper()
	var nets []record.Network
	var eps []record.Endpoint
	for i := 0; i < 300; i++ {
		n := network(fmt.Sprintf("%064x", i), fmt.Sprintf("p%d", i/10))
		nets = append(nets, n)
		for e := 0; e < 10; e++ {
			id := fmt.Sprintf("%04x%08x%052x", e, i, 0)
			eps = append(eps, record.Endpoint{NetworkID: n.ID, ID: id, Link: "ule" + id[:12], MAC: "02:42:c6:12:00:01"})
		}
	}
	writeV3(t, path, nets, eps, func(*bolt.Tx) error { return nil })
	return nets, eps
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestFailedCompactionIsReportedAndRetried: a compaction that fails (here
// its copy cannot be created) leaves the migrated file complete, says why
// through CompactError, and is tried again at the next Open.
func TestFailedCompactionIsReportedAndRetried(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	nets, eps := v3File(t, path)
	if err := os.MkdirAll(filepath.Join(compactPath(path), "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	if err := db.CompactError(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("CompactError() = %v, want the failure naming %s", err, path)
	}
	mustView(t, db, func(tx *Tx) error { return checkMany(tx, nets, eps) })
	db.Close()
	big := size(t, path)

	if err := os.RemoveAll(compactPath(path)); err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	defer db.Close()
	if err := db.CompactError(); err != nil {
		t.Errorf("CompactError() = %v after the retry", err)
	}
	if small := size(t, path); small*2 > big {
		t.Errorf("file of %d bytes is %d after the retried compaction, want less than half", big, small)
	}
	mustView(t, db, func(tx *Tx) error { return checkMany(tx, nets, eps) })
	db.Close()
	// Compacted once: the next Open leaves the file alone.
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		t.Errorf("a compacted file was compacted again: %v", err)
	}
}

// TestCompactionKeepsModeOwnerAndSymlink: the compacted copy replaces the
// file a symlink names (not the symlink: the copy would land in the
// link's directory) with the file's mode and owner.
func TestCompactionKeepsModeOwnerAndSymlink(t *testing.T) {
	realDir, linkDir := t.TempDir(), t.TempDir()
	real, link := filepath.Join(realDir, "state.db"), filepath.Join(linkDir, "state.db")
	nets, eps := v3File(t, real)
	if err := os.Chmod(real, 0o640); err != nil {
		t.Fatal(err)
	}
	owner := os.Getuid() == 0
	if owner {
		if err := os.Chown(real, 4321, 4322); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	big := size(t, real)
	db := open(t, link)
	defer db.Close()
	if err := db.CompactError(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symlink: %v %v", link, fi.Mode(), err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size()*2 > big {
		t.Errorf("%s of %d bytes is %d after the migration, want less than half", real, big, fi.Size())
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v after compaction, want 0640", fi.Mode().Perm())
	}
	if st := fi.Sys().(*syscall.Stat_t); owner && (st.Uid != 4321 || st.Gid != 4322) {
		t.Errorf("owner %d:%d after compaction, want 4321:4322", st.Uid, st.Gid)
	}
	for _, d := range []string{realDir, linkDir} {
		if entries, _ := os.ReadDir(d); len(entries) != 1 {
			t.Errorf("%s holds %v, want only the state file", d, entries)
		}
	}
	mustView(t, db, func(tx *Tx) error { return checkMany(tx, nets, eps) })
	if _, err := Open(link, Options{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of the compacted file: %v, want ErrLocked", err)
	}
}
