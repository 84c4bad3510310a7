package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Tx is a transaction over the state. Its methods keep the indexes
// consistent with the records; they are valid only inside the View, Update
// or Batch call that passed the Tx.
type Tx struct {
	tx *bolt.Tx
}

func (t *Tx) b(name []byte) *bolt.Bucket { return t.tx.Bucket(name) }

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

func put(b *bolt.Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

// Set indexes: a bucket of nested buckets, key -> set of members. Empty
// sets are removed, so "has a member" is one cursor step.

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

// Network returns the network with the given ID.
func (t *Tx) Network(id string) (Network, bool, error) {
	return get[Network](t.b(bucketNetworks), id)
}

// NetworksOn returns the networks (complete and pending) whose parent is
// the named link, in ID order.
func (t *Tx) NetworksOn(parent string) ([]Network, error) {
	var out []Network
	for _, id := range indexMembers(t.b(bucketByParent), parent) {
		n, ok, err := t.Network(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: parent index of %s names network %s, which has no record", ErrCorrupt, parent, id)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParentInUse reports whether any network record names the link as parent.
func (t *Tx) ParentInUse(parent string) bool {
	return indexHas(t.b(bucketByParent), parent)
}

// ParentUse returns, for every link that networks name as parent, how many
// name it.
func (t *Tx) ParentUse() map[string]int {
	out := map[string]int{}
	_ = t.b(bucketByParent).ForEachBucket(func(k []byte) error {
		out[string(k)] = len(indexMembers(t.b(bucketByParent), string(k)))
		return nil
	})
	return out
}

// PutNetwork writes the network record and its index entries.
func (t *Tx) PutNetwork(n Network) error {
	old, ok, err := t.Network(n.ID)
	if err != nil {
		return err
	}
	if ok && old.Parent != n.Parent {
		if err := indexRemove(t.b(bucketByParent), old.Parent, n.ID); err != nil {
			return err
		}
	}
	if err := indexAdd(t.b(bucketByParent), n.Parent, n.ID); err != nil {
		return err
	}
	if n.Pending != nil {
		err = t.b(bucketPending).Put([]byte(n.ID), nil)
	} else {
		err = t.b(bucketPending).Delete([]byte(n.ID))
	}
	if err != nil {
		return err
	}
	return put(t.b(bucketNetworks), n.ID, n)
}

// DeleteNetwork removes the network, its endpoints and their index entries.
// A missing network is not an error.
func (t *Tx) DeleteNetwork(id string) error {
	n, ok, err := t.Network(id)
	if err != nil || !ok {
		return err
	}
	eps, err := t.Endpoints(id)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		if err := t.b(bucketLinks).Delete([]byte(ep.Link)); err != nil {
			return err
		}
	}
	if t.b(bucketEndpoints).Bucket([]byte(id)) != nil {
		if err := t.b(bucketEndpoints).DeleteBucket([]byte(id)); err != nil {
			return err
		}
	}
	if err := indexRemove(t.b(bucketByParent), n.Parent, id); err != nil {
		return err
	}
	if err := t.b(bucketPending).Delete([]byte(id)); err != nil {
		return err
	}
	return t.b(bucketNetworks).Delete([]byte(id))
}

// Pending returns the networks whose creation has not finished.
func (t *Tx) Pending() ([]Network, error) {
	var out []Network
	err := t.b(bucketPending).ForEach(func(k, _ []byte) error {
		n, ok, err := t.Network(string(k))
		if err != nil {
			return err
		}
		if ok {
			out = append(out, n)
		}
		return nil
	})
	return out, err
}

// ForEachNetwork calls fn for every network in ID order.
func (t *Tx) ForEachNetwork(fn func(Network) error) error {
	return t.b(bucketNetworks).ForEach(func(k, v []byte) error {
		var n Network
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("%w: network record %q: %w", ErrCorrupt, k, err)
		}
		return fn(n)
	})
}

// ForEachNetworkWithHostAddress calls fn for every network whose record
// has a host address, in ID order, decoding only those.
func (t *Tx) ForEachNetworkWithHostAddress(fn func(Network) error) error {
	return t.b(bucketNetworks).ForEach(func(k, v []byte) error {
		if !bytes.Contains(v, []byte(`"host_address":`)) {
			return nil
		}
		var n Network
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("%w: network record %q: %w", ErrCorrupt, k, err)
		}
		return fn(n)
	})
}

// Endpoint returns one endpoint of a network.
func (t *Tx) Endpoint(networkID, id string) (Endpoint, bool, error) {
	b := t.b(bucketEndpoints).Bucket([]byte(networkID))
	if b == nil {
		return Endpoint{}, false, nil
	}
	return get[Endpoint](b, id)
}

// Endpoints returns the endpoints of a network in ID order.
func (t *Tx) Endpoints(networkID string) ([]Endpoint, error) {
	b := t.b(bucketEndpoints).Bucket([]byte(networkID))
	if b == nil {
		return nil, nil
	}
	var out []Endpoint
	err := b.ForEach(func(k, v []byte) error {
		var ep Endpoint
		if err := json.Unmarshal(v, &ep); err != nil {
			return fmt.Errorf("%w: endpoint record %q: %w", ErrCorrupt, k, err)
		}
		out = append(out, ep)
		return nil
	})
	return out, err
}

// EndpointByLink returns the endpoint whose host link has the given name.
func (t *Tx) EndpointByLink(link string) (Endpoint, bool, error) {
	ref := t.b(bucketLinks).Get([]byte(link))
	if ref == nil {
		return Endpoint{}, false, nil
	}
	var key struct{ N, E string }
	if err := json.Unmarshal(ref, &key); err != nil {
		return Endpoint{}, false, fmt.Errorf("%w: link index %q: %w", ErrCorrupt, link, err)
	}
	return t.Endpoint(key.N, key.E)
}

// PutEndpoint writes the endpoint record; its network must exist. The link
// name must not belong to another endpoint.
func (t *Tx) PutEndpoint(ep Endpoint) error {
	if _, ok, err := t.Network(ep.NetworkID); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %s", ErrNoNetwork, ep.NetworkID)
	}
	if other, ok, err := t.EndpointByLink(ep.Link); err != nil {
		return err
	} else if ok && (other.ID != ep.ID || other.NetworkID != ep.NetworkID) {
		return fmt.Errorf("link name %s already belongs to endpoint %s", ep.Link, other.ID)
	}
	b, err := t.b(bucketEndpoints).CreateBucketIfNotExists([]byte(ep.NetworkID))
	if err != nil {
		return err
	}
	if err := put(t.b(bucketLinks), ep.Link, struct{ N, E string }{ep.NetworkID, ep.ID}); err != nil {
		return err
	}
	return put(b, ep.ID, ep)
}

// DeleteEndpoint removes an endpoint record; a missing one is not an error.
func (t *Tx) DeleteEndpoint(networkID, id string) error {
	ep, ok, err := t.Endpoint(networkID, id)
	if err != nil || !ok {
		return err
	}
	if err := t.b(bucketLinks).Delete([]byte(ep.Link)); err != nil {
		return err
	}
	return t.b(bucketEndpoints).Bucket([]byte(networkID)).Delete([]byte(id))
}

// ParentLink returns the record of a parent link underlay created.
func (t *Tx) ParentLink(name string) (ParentLink, bool, error) {
	return get[ParentLink](t.b(bucketParentLinks), name)
}

// ParentLinks returns every parent link underlay created, in name order.
func (t *Tx) ParentLinks() ([]ParentLink, error) {
	var out []ParentLink
	err := t.b(bucketParentLinks).ForEach(func(k, v []byte) error {
		var p ParentLink
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
func (t *Tx) PutParentLink(p ParentLink) error {
	if err := t.DeleteParentLink(p.Name); err != nil {
		return err
	}
	if p.Base != "" {
		if err := indexAdd(t.b(bucketParentLinksByBase), p.Base, p.Name); err != nil {
			return err
		}
	}
	return put(t.b(bucketParentLinks), p.Name, p)
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
