// Package store owns underlay's durable state: one bbolt file holding the
// networks, their endpoints, the parent links underlay created, the
// pending reservations that make network creation crash-safe, and the IPAM
// driver's pools and addresses.
//
// Every read goes through View, every write through Update or Batch. A Tx
// keeps the secondary indexes (networks by parent, endpoints by link name
// and by address, pending reservations) consistent with the records, so callers never scan
// the whole file on a request path.
//
// The layout (schema 5), bucket by bucket; ID is an ID in its key form
// (keys.go: a Docker ID as its 32 bytes), seq a network's sequence number
// (keys.go: 2 to 9 bytes, given once, never reused), {x} a set of keys
// (a nested bucket, tx.go):
//
//	meta                  "schema" -> version, "instance" -> instance ID
//	nets                  ID -> seq, then the Network as JSON without its ID
//	nets-by-seq           seq -> ID
//	nets-by-parent        parent link name -> {seq}
//	nets-pending          ID -> nothing, while the network has a reservation
//	eps                   seq + endpoint ID -> the Endpoint's other fields (codec.go)
//	eps-by-link           link name -> seq + the endpoint ID's first bytes
//	eps-by-addr           seq + address (16 bytes) + endpoint ID -> nothing (addrs.go)
//	parent-links          name -> ParentLink as JSON
//	parent-links-by-base  base link name -> {name}
//	ipam-pools            pool ID -> IPAMPool as JSON
//	ipam-addresses        pool ID -> {address}
//	lease-releases        network/endpoint/address -> PendingRelease as JSON (when any)
//	ipam-names            space|subnet -> {name -> IPAMName, address -> name} (ipamnames.go; when any)
//
// Endpoints are nearly all of the records, so their layout is the size of
// the file: all networks' endpoints share one flat bucket ordered by
// network (a network's endpoints are one prefix scan; a network costs no
// page of its own), a key holds the network's short sequence number
// rather than its ID, and a value holds neither ID and its common fields
// in binary. Pages of keys written in runs are packed full (pack.go).
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout version this build writes. A file with a higher
// version is refused; a file with a lower one is migrated on Open.
const SchemaVersion = 5

// ErrLocked is returned by Open when another process holds the state file.
var ErrLocked = errors.New("state file is locked by another process")

// ErrCorrupt is returned by Open when the file is not a readable underlay
// state file.
var ErrCorrupt = errors.New("state file is corrupt or not an underlay state file")

// ErrNewerSchema is returned by Open when the file was written by a newer
// underlay.
var ErrNewerSchema = errors.New("state file has a newer schema")

// ErrNoNetwork is returned when an endpoint is written for a network that
// has no record.
var ErrNoNetwork = errors.New("network not found")

var (
	bucketMeta        = []byte("meta")
	bucketNetworks    = []byte("nets")
	bucketNetworkSeqs = []byte("nets-by-seq")
	bucketByParent    = []byte("nets-by-parent")
	bucketPending     = []byte("nets-pending")
	bucketEndpoints   = []byte("eps")
	bucketLinks       = []byte("eps-by-link")
	// Since schema 5: the endpoints' addresses (addrs.go).
	bucketAddrs       = []byte("eps-by-addr")
	bucketParentLinks = []byte("parent-links")
	// Since schema 2: base link -> the parent links underlay created on it.
	bucketParentLinksByBase = []byte("parent-links-by-base")
	keySchema               = []byte("schema")
	// keyInstance holds the ID that marks the links this state file owns.
	keyInstance = []byte("instance")
	// keyCompact marks a file a migration rewrote and Open has yet to
	// compact (compact.go).
	keyCompact = []byte("compact")
)

// allocSize is bbolt's AllocSize: a file bigger than it is kept that much
// bigger than its pages need (a smaller one is as big as its mapping, a
// power of two), so that it grows by an ftruncate and fsync per allocSize
// written. bbolt's default, 16 MiB, added 16 MiB of zeros to every state
// file past 16 MiB: as much as the state of 10,000 networks. Steps of 1 MiB
// cost an extra fsync per MiB the file grows, next to the one of every
// commit.
const allocSize = 1 << 20

// Options tunes Open. The zero value is usable.
type Options struct {
	// LockTimeout bounds the wait for the file lock held by another process.
	// Zero means 2 seconds.
	LockTimeout time.Duration
	// MaxBatch bounds how many Batch calls share one commit. Zero means 256.
	MaxBatch int
	// ObserveCommit, when set, is told how long every write that committed
	// took (Update and Batch, from the call to the durable commit: a
	// Batch's wait for the group commit included). It must return at once.
	ObserveCommit func(time.Duration)
}

// DB is an open state file.
type DB struct {
	bolt     *bolt.DB
	path     string // bolt's may be the name it was written under (compactMigrated)
	batch    *batcher
	instance string
	observe  func(time.Duration)
	// compactErr is why Open did not compact the file a migration
	// rewrote (CompactError).
	compactErr error
}

// Open opens (creating if needed, with its directory) the state file at path,
// checks its schema version and migrates it. It never truncates or rewrites a
// file it cannot read: a corrupt file, a newer schema or a lock held by
// another process is an error naming the file.
func Open(path string, opts Options) (db *DB, err error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 2 * time.Second
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 256
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the state directory %s: %w (set --state to a writable path)", filepath.Dir(path), err)
	}
	// A truncated file makes bbolt read past the end of its mapping, which
	// faults; turn that fault into an error instead of a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: reading it failed (%v); move it aside to start with an empty state", ErrCorrupt, path, r)
		}
	}()
	bdb, file, err := openLocked(path, opts.LockTimeout)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another underlay process (gave up after %s); stop it or use another --state", ErrLocked, path, opts.LockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %w; move it aside to start with an empty state", ErrCorrupt, path, err)
	case err != nil:
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	if err := checkFile(bdb, file); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("%w: %s: %w; move it aside to start with an empty state", ErrCorrupt, path, err)
	}
	bdb.AllocSize = allocSize
	compact, err := migrate(bdb)
	if err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	var compactErr error
	if compact {
		if bdb, compactErr = compactMigrated(bdb, path, opts.LockTimeout); bdb == nil {
			return nil, compactErr
		}
	} else {
		_ = os.Remove(compactPath(realPath(path))) // left by a crash during compactMigrated
	}
	db = &DB{bolt: bdb, path: path, observe: opts.ObserveCommit, compactErr: compactErr}
	_ = bdb.View(func(tx *bolt.Tx) error {
		db.instance = string(tx.Bucket(bucketMeta).Get(keyInstance))
		return nil
	})
	db.batch = newBatcher(bdb, opts.MaxBatch)
	return db, nil
}

// openLocked opens and locks the file at path, and makes sure the file it
// locked is still the one at path. An Open that waited for the lock of a
// file that meanwhile a compaction's copy replaced (compactMigrated) gets
// it once the file is no longer at path: it would use a file nobody else
// sees, its writes lost. Such an Open opens the path again, within the
// same timeout.
func openLocked(path string, timeout time.Duration) (*bolt.DB, *os.File, error) {
	deadline := time.Now().Add(timeout)
	for {
		var file *os.File
		bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		}})
		if err != nil {
			return nil, nil, err
		}
		held, err := file.Stat()
		if err == nil {
			var named os.FileInfo
			if named, err = os.Stat(path); err == nil && os.SameFile(held, named) {
				return bdb, file, nil
			}
		}
		_ = bdb.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		if timeout = time.Until(deadline); timeout <= 0 {
			return nil, nil, berrors.ErrTimeout
		}
	}
}

// checkFile makes sure every page the file claims lies inside it, so a
// truncated file is reported before any request reads it.
func checkFile(bdb *bolt.DB, file *os.File) error {
	return bdb.View(func(tx *bolt.Tx) error {
		fi, err := file.Stat()
		if err != nil {
			return err
		}
		if need := int64(tx.Size()); need > fi.Size() {
			return fmt.Errorf("file is %d bytes but its pages need %d (truncated)", fi.Size(), need)
		}
		return nil
	})
}

// InstanceID is the random ID this state file was given when it was first
// opened (or first opened by an underlay that marks its links). Every link
// underlay creates carries it, so an instance tells its links from another
// instance's on the same host.
func (db *DB) InstanceID() string { return db.instance }

func firstBucket(tx *bolt.Tx) []byte {
	k, _ := tx.Cursor().First()
	return k
}

// Path returns the file's path.
func (db *DB) Path() string { return db.path }

// Close waits for queued batches, then closes the file.
func (db *DB) Close() error {
	db.batch.close()
	return db.bolt.Close()
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(*Tx) error) error {
	return db.bolt.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// Update runs fn in a read-write transaction of its own and commits it if fn
// returns nil.
func (db *DB) Update(fn func(*Tx) error) error {
	start := time.Now()
	err := db.bolt.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
	db.committed(start, err)
	return err
}

// Batch runs fn in a read-write transaction that it may share with other
// concurrent Batch calls (one commit for all of them). fn runs after the
// calls queued before it, sees their writes, and may run more than once, so
// it must only depend on the transaction. An error from fn fails only that
// call.
func (db *DB) Batch(fn func(*Tx) error) error {
	start := time.Now()
	err := db.batch.do(fn)
	db.committed(start, err)
	return err
}

// committed reports a write that started at start, if it committed.
func (db *DB) committed(start time.Time, err error) {
	if err == nil && db.observe != nil {
		db.observe(time.Since(start))
	}
}

// Counts is how much the state holds, for metrics.
type Counts struct {
	// Networks are the network records, pending ones included.
	Networks int
	// Endpoints are the endpoint records.
	Endpoints int
	// ParentLinks are the parent links underlay created and owns.
	ParentLinks int
	// EndpointLinks are the endpoints' host link names on record.
	EndpointLinks int
	// HostLinks are the complete networks with a host address, each with
	// its host link.
	HostLinks int
}

// Counts counts the records; it reads every key of the counted buckets
// (and decodes only the networks with a host address), so it is for
// scrapes, not for request paths.
func (t *Tx) Counts() (Counts, error) {
	keys := func(b *bolt.Bucket) int {
		n := 0
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		return n
	}
	c := Counts{
		Networks:      keys(t.b(bucketNetworks)),
		Endpoints:     keys(t.b(bucketEndpoints)),
		ParentLinks:   keys(t.b(bucketParentLinks)),
		EndpointLinks: keys(t.b(bucketLinks)),
	}
	err := t.ForEachNetworkWithHostAddress(func(n record.Network) error {
		if n.HostAddress != "" && n.Pending == nil {
			c.HostLinks++
		}
		return nil
	})
	return c, err
}
