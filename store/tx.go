package store

import (
	"encoding/json"
	"fmt"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// Tx is a transaction over the state. Its methods keep the indexes
// consistent with the records; they are valid only inside the View, Update
// or Batch call that passed the Tx.
type Tx struct {
	tx *bolt.Tx
	// added tracks the keys this write transaction added to the big
	// buckets, to choose their page fill (pack.go).
	added map[*bolt.Bucket]*added
}

func (t *Tx) b(name []byte) *bolt.Bucket { return t.tx.Bucket(name) }

// get and putJSON read and write the small records kept as JSON under
// their name (parent links, IPAM pools).
func get[T any](b *bolt.Bucket, key string) (T, bool, error) {
	var v T
	raw := b.Get([]byte(key))
	if raw == nil {
		return v, false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, false, fmt.Errorf("%w: record %q: %w", ErrCorrupt, key, err)
	}
	return v, true, nil
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode record %q: %w", key, err)
	}
	return b.Put([]byte(key), raw)
}

// Set indexes: a bucket of nested buckets, key -> set of members. Empty
// sets are removed, so "has a member" is one cursor step. A set of a few
// members is stored inline in its parent's page.

func indexAdd(index *bolt.Bucket, key, member string) error {
	set, err := index.CreateBucketIfNotExists([]byte(key))
	if err != nil {
		return err
	}
	return set.Put([]byte(member), nil)
}

func indexRemove(index *bolt.Bucket, key, member string) error {
	set := index.Bucket([]byte(key))
	if set == nil {
		return nil
	}
	if err := set.Delete([]byte(member)); err != nil {
		return err
	}
	if k, _ := set.Cursor().First(); k == nil {
		return index.DeleteBucket([]byte(key))
	}
	return nil
}

func indexMembers(index *bolt.Bucket, key string) []string {
	set := index.Bucket([]byte(key))
	if set == nil {
		return nil
	}
	var out []string
	_ = set.ForEach(func(k, _ []byte) error { out = append(out, string(k)); return nil })
	return out
}

func indexHas(index *bolt.Bucket, key string) bool {
	set := index.Bucket([]byte(key))
	if set == nil {
		return false
	}
	k, _ := set.Cursor().First()
	return k != nil
}

// ParentLink returns the record of a parent link underlay created.
func (t *Tx) ParentLink(name string) (record.ParentLink, bool, error) {
	return get[record.ParentLink](t.b(bucketParentLinks), name)
}

// ParentLinks returns every parent link underlay created, in name order.
func (t *Tx) ParentLinks() ([]record.ParentLink, error) {
	var out []record.ParentLink
	err := t.b(bucketParentLinks).ForEach(func(k, v []byte) error {
		var p record.ParentLink
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("%w: parent link record %q: %w", ErrCorrupt, k, err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// PutParentLink records that underlay created (or is about to create) a
// parent link.
func (t *Tx) PutParentLink(p record.ParentLink) error {
	if err := t.DeleteParentLink(p.Name); err != nil {
		return err
	}
	if p.Base != "" {
		if err := indexAdd(t.b(bucketParentLinksByBase), p.Base, p.Name); err != nil {
			return err
		}
	}
	return putJSON(t.b(bucketParentLinks), p.Name, p)
}

// DeleteParentLink forgets a parent link.
func (t *Tx) DeleteParentLink(name string) error {
	old, ok, err := t.ParentLink(name)
	if err != nil || !ok {
		return err
	}
	if old.Base != "" {
		if err := indexRemove(t.b(bucketParentLinksByBase), old.Base, name); err != nil {
			return err
		}
	}
	return t.b(bucketParentLinks).Delete([]byte(name))
}

// ParentLinksOn returns the names of the parent links underlay created on
// top of the named link (VLANs whose base it is), in name order.
func (t *Tx) ParentLinksOn(base string) []string {
	return indexMembers(t.b(bucketParentLinksByBase), base)
}
