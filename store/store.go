// Package store owns underlay's durable state: one bbolt file holding the
// networks, their endpoints, the parent links underlay created, the
// pending reservations that make network creation crash-safe, and the IPAM
// driver's pools and addresses.
//
// Every read goes through View, every write through Update or Batch. A Tx
// keeps the secondary indexes (networks by parent, endpoints by link name,
// pending reservations) consistent with the records, so callers never scan
// the whole file on a request path.
package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout version this build writes. A file with a higher
// version is refused; a file with a lower one is migrated on Open.
const SchemaVersion = 3

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
	bucketNetworks    = []byte("networks")
	bucketByParent    = []byte("networks-by-parent")
	bucketPending     = []byte("pending")
	bucketEndpoints   = []byte("endpoints")
	bucketLinks       = []byte("endpoints-by-link")
	bucketParentLinks = []byte("parent-links")
	// Since schema 2: base link -> the parent links underlay created on it.
	bucketParentLinksByBase = []byte("parent-links-by-base")
	keySchema               = []byte("schema")
	// keyInstance holds the ID that marks the links this state file owns.
	keyInstance = []byte("instance")
)

// migrations[v] upgrades a file from schema v to v+1 inside one transaction
// (all steps of one Open share it: a failed migration changes nothing).
// Version 0 is a file without buckets (new or empty). To change the layout:
// bump SchemaVersion, add the step, and test it on a file of the old
// version (store_test.go, TestMigrateFromSchema1).
var migrations = map[int]func(*bolt.Tx) error{
	0: func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketNetworks, bucketByParent, bucketPending, bucketEndpoints, bucketLinks, bucketParentLinks} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	},
	// 1 -> 2: index the parent links by their base link.
	1: func(tx *bolt.Tx) error {
		byBase, err := tx.CreateBucketIfNotExists(bucketParentLinksByBase)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketParentLinks).ForEach(func(k, v []byte) error {
			var p ParentLink
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("%w: parent link record %q: %w", ErrCorrupt, k, err)
			}
			if p.Base == "" {
				return nil
			}
			return indexAdd(byBase, p.Base, p.Name)
		})
	},
	// 2 -> 3: the IPAM driver's pools and addresses.
	2: migrateIPAM,
}

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
	batch    *batcher
	instance string
	observe  func(time.Duration)
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
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another underlay process (gave up after %s); stop it or use another --state", ErrLocked, path, opts.LockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %w; move it aside to start with an empty state", ErrCorrupt, path, err)
	case err != nil:
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	if err := checkFile(bdb); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("%w: %s: %w; move it aside to start with an empty state", ErrCorrupt, path, err)
	}
	if err := migrate(bdb); err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	db = &DB{bolt: bdb, observe: opts.ObserveCommit}
	_ = bdb.View(func(tx *bolt.Tx) error {
		db.instance = string(tx.Bucket(bucketMeta).Get(keyInstance))
		return nil
	})
	db.batch = newBatcher(bdb, opts.MaxBatch)
	return db, nil
}

// checkFile makes sure every page the file claims lies inside it, so a
// truncated file is reported before any request reads it.
func checkFile(bdb *bolt.DB) error {
	return bdb.View(func(tx *bolt.Tx) error {
		fi, err := os.Stat(bdb.Path())
		if err != nil {
			return err
		}
		if need := int64(tx.Size()); need > fi.Size() {
			return fmt.Errorf("file is %d bytes but its pages need %d (truncated)", fi.Size(), need)
		}
		return nil
	})
}

func migrate(bdb *bolt.DB) error {
	return bdb.Update(func(tx *bolt.Tx) error {
		version := 0
		if meta := tx.Bucket(bucketMeta); meta != nil {
			v, err := strconv.Atoi(string(meta.Get(keySchema)))
			if err != nil {
				return fmt.Errorf("%w: schema version %q is not a number", ErrCorrupt, meta.Get(keySchema))
			}
			version = v
		} else if firstBucket(tx) != nil {
			return fmt.Errorf("%w: it holds bbolt buckets but no underlay schema version", ErrCorrupt)
		}
		if version > SchemaVersion {
			return fmt.Errorf("%w: version %d, this underlay reads up to %d; upgrade underlay or restore the file this version wrote", ErrNewerSchema, version, SchemaVersion)
		}
		for ; version < SchemaVersion; version++ {
			step, ok := migrations[version]
			if !ok {
				return fmt.Errorf("no migration from schema version %d", version)
			}
			if err := step(tx); err != nil {
				return fmt.Errorf("migrate schema %d to %d: %w", version, version+1, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if len(meta.Get(keyInstance)) == 0 {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return fmt.Errorf("make the instance ID: %w", err)
			}
			if err := meta.Put(keyInstance, []byte(hex.EncodeToString(b[:]))); err != nil {
				return err
			}
		}
		return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
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
func (db *DB) Path() string { return db.bolt.Path() }

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
		ParentLinks:   keys(t.b(bucketParentLinks)),
		EndpointLinks: keys(t.b(bucketLinks)),
	}
	eps := t.b(bucketEndpoints)
	if err := eps.ForEachBucket(func(k []byte) error {
		c.Endpoints += keys(eps.Bucket(k))
		return nil
	}); err != nil {
		return c, err
	}
	err := t.ForEachNetworkWithHostAddress(func(n Network) error {
		if n.HostAddress != "" && n.Pending == nil {
			c.HostLinks++
		}
		return nil
	})
	return c, err
}
