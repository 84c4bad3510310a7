package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactMigrated rewrites a file a migration rewrote into a new file and
// puts it in the old one's place, and returns it open. bbolt never shrinks
// a file: the pages the old layout took stay in it, free, and their list
// is written at every commit (the schema 3 file of 10,000 networks would
// stay 100 MiB, 84 of them free, and every commit would write 170 KiB of
// list).
//
// The copy is written and synced next to the file (the file a symlink at
// path names), without the compaction mark, with the file's mode and
// owner, and locked before it replaces the file, which stays locked until
// then (an Open waiting for the old file's lock opens the path again:
// openLocked). Should anything before the rename fail, the migrated file
// is kept as it is, complete, only bigger and still marked, and the error
// says why (CompactError); the next Open tries again. A crash at any step
// leaves the old file or the synced copy at path, both complete. Only a
// failure to sync the directory after the rename is Open's error (nil
// DB): then the rename may not be on disk, and writes to the copy could
// be lost with it.
func compactMigrated(src *bolt.DB, path string, timeout time.Duration) (*bolt.DB, error) {
	target := realPath(path)
	tmp := compactPath(target)
	fail := func(step string, err error) (*bolt.DB, error) {
		return src, fmt.Errorf("compact the migrated state file %s: %s: %w; it is complete as it is, only bigger, and the next start tries again", path, step, err)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return fail("stat it", err)
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("remove the copy a crash left", err)
	}
	dst, err := bolt.Open(tmp, fi.Mode().Perm(), &bolt.Options{Timeout: timeout})
	if err != nil {
		return fail("create the copy "+tmp, err)
	}
	abort := func(step string, err error) (*bolt.DB, error) {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return fail(step, err)
	}
	dst.AllocSize = allocSize
	// Commits of 8 MiB bound the memory the copy holds.
	if err := bolt.Compact(dst, src, 8<<20); err != nil {
		return abort("copy it to "+tmp, err)
	}
	if err := dst.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyCompact) }); err != nil {
		return abort("unmark the copy", err)
	}
	if err := keepOwner(tmp, fi); err != nil {
		return abort("give the copy the file's mode and owner", err)
	}
	dir, err := os.Open(filepath.Dir(target))
	if err != nil {
		return abort("open its directory", err)
	}
	defer dir.Close()
	if err := os.Rename(tmp, target); err != nil {
		return abort("put the copy in its place", err)
	}
	err = dir.Sync()
	_ = src.Close()
	if err != nil {
		_ = dst.Close()
		return nil, fmt.Errorf("state file %s: its compacted copy replaced it, but syncing the directory %s failed: %w; start again (the file is complete, compacted or not)", path, filepath.Dir(target), err)
	}
	return dst, nil
}

// keepOwner gives the file name the mode and owner of fi, durably (bbolt's
// commits sync the data only).
func keepOwner(name string, fi os.FileInfo) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(fi.Mode().Perm()); err != nil {
		return err
	}
	now, err := f.Stat()
	if err != nil {
		return err
	}
	want, ok := fi.Sys().(*syscall.Stat_t)
	got, ok2 := now.Sys().(*syscall.Stat_t)
	if ok && ok2 && (got.Uid != want.Uid || got.Gid != want.Gid) {
		if err := f.Chown(int(want.Uid), int(want.Gid)); err != nil {
			return err
		}
	}
	return f.Sync()
}

// realPath is path with its symlinks resolved, or path when that fails
// (compactMigrated then fails on it too).
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// compactPath is the name compactMigrated writes the new file under.
func compactPath(path string) string { return path + ".compact" }

// CompactError is why Open did not compact a file it migrated to a new
// schema: nil when it did, or when no migration was due. The file is
// complete either way, only bigger, and the next Open tries again. The
// store has no logger: the caller should log it.
func (db *DB) CompactError() error { return db.compactErr }
