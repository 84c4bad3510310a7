package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// The buckets of schemas 1 to 3 that schema 4 replaced (store.go has the
// layout of 4). Schema 3 kept networks as JSON under their ID, the
// endpoints of each network in a nested bucket of their own (a page of
// its own per network past a few endpoints) as JSON repeating both IDs,
// and the link index's values as JSON {"N": network ID, "E": endpoint ID}.
var (
	v3Networks  = []byte("networks")
	v3ByParent  = []byte("networks-by-parent") // parent -> {network ID}
	v3Pending   = []byte("pending")            // network ID -> nothing
	v3Endpoints = []byte("endpoints")          // network ID -> {endpoint ID -> JSON}
	v3Links     = []byte("endpoints-by-link")
)

// migrations[v] upgrades a file from schema v to v+1 inside one transaction
// (all steps of one Open share it: a failed migration changes nothing).
// Version 0 is a file without buckets (new or empty). To change the layout:
// bump SchemaVersion, add the step, and test it on a file of the old
// version (migrate_test.go).
var migrations = map[int]func(*bolt.Tx) error{
	0: func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, v3Networks, v3ByParent, v3Pending, v3Endpoints, v3Links, bucketParentLinks} {
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
			var p record.ParentLink
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
	// 3 -> 4: the compact layout of networks and endpoints.
	3: migrateCompact,
	// 4 -> 5: index the endpoints' addresses (addrs.go).
	4: migrateAddrs,
}

// migrate brings the file to SchemaVersion and reports whether it is due
// for compaction (compact.go): a migration from an older schema marks it
// so in the migration's transaction, and the compacted copy is written
// without the mark, so a compaction a crash or an error interrupted is
// done at the next Open.
func migrate(bdb *bolt.DB) (compact bool, err error) {
	err = bdb.Update(func(tx *bolt.Tx) error {
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
		from := version
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
		if from > 0 && from < SchemaVersion {
			if err := meta.Put(keyCompact, []byte{1}); err != nil {
				return err
			}
		}
		compact = meta.Get(keyCompact) != nil
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
	return compact, err
}

// migrateCompact is the schema 3 -> 4 step: it writes every network
// through PutNetwork, which numbers it and builds the network indexes (the
// old ones only repeat the records), then every endpoint and the link
// index, then deletes the old buckets.
//
// The new buckets start empty, so bbolt holds each in memory until the
// commit, in one node: a key inserted before others costs a move of all
// of them. The networks go in ID order, so their sequence numbers, and
// with them the endpoints' keys, ascend; the link names are sorted before
// they are written.
func migrateCompact(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketNetworks, bucketNetworkSeqs, bucketByParent, bucketPending, bucketEndpoints, bucketLinks} {
		if _, err := tx.CreateBucket(b); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	t := &Tx{tx: tx}
	err := tx.Bucket(v3Networks).ForEach(func(k, v []byte) error {
		var n record.Network
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("%w: schema 3 network record %q: %w", ErrCorrupt, k, err)
		}
		n.ID = string(k) // the key is what schema 3 looked records up by
		if err := t.PutNetwork(n); err != nil {
			return fmt.Errorf("network %s: %w", n.ID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	type linkEntry struct {
		link, net, ep string
		ref           []byte
	}
	var links []linkEntry
	old := tx.Bucket(v3Endpoints)
	err = old.ForEachBucket(func(netID []byte) error {
		seq, err := t.networkSeq(string(netID))
		if err != nil || seq == nil {
			// Schema 3 wrote endpoints only under a network it had a
			// record of, and deleted them with it: none to carry over.
			return err
		}
		return old.Bucket(netID).ForEach(func(k, v []byte) error {
			var ep record.Endpoint
			if err := json.Unmarshal(v, &ep); err != nil {
				return fmt.Errorf("%w: schema 3 endpoint record %q of network %s: %w", ErrCorrupt, k, netID, err)
			}
			ep.NetworkID, ep.ID = string(netID), string(k)
			key := endpointKey(seq, ep.ID)
			ref, err := linkRef(key)
			if err != nil {
				return err
			}
			value, err := encodeEndpoint(ep)
			if err != nil {
				return err
			}
			if err := t.put(t.b(bucketEndpoints), key, value); err != nil {
				return fmt.Errorf("endpoint %s of network %s: %w", ep.ID, ep.NetworkID, err)
			}
			links = append(links, linkEntry{ep.Link, ep.NetworkID, ep.ID, ref})
			return nil
		})
	})
	if err != nil {
		return err
	}
	slices.SortFunc(links, func(a, b linkEntry) int { return strings.Compare(a.link, b.link) })
	for i, l := range links {
		// Schema 3's PutEndpoint refused a link of another endpoint.
		if i > 0 && links[i-1].link == l.link {
			p := links[i-1]
			return fmt.Errorf("%w: endpoints %s of network %s and %s of network %s have the same link %s", ErrCorrupt, p.ep, p.net, l.ep, l.net, l.link)
		}
		if err := t.put(t.b(bucketLinks), []byte(l.link), l.ref); err != nil {
			return fmt.Errorf("index link %s of endpoint %s: %w", l.link, l.ep, err)
		}
	}
	for _, b := range [][]byte{v3Networks, v3ByParent, v3Pending, v3Endpoints, v3Links} {
		if err := tx.DeleteBucket(b); err != nil {
			return fmt.Errorf("delete schema 3 bucket %s: %w", b, err)
		}
	}
	return nil
}
