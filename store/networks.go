package store

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// Network returns the network with the given ID.
func (t *Tx) Network(id string) (record.Network, bool, error) {
	v := t.b(bucketNetworks).Get(encodeID(id))
	if v == nil {
		return record.Network{}, false, nil
	}
	n, _, err := decodeNetwork(id, v)
	return n, err == nil, err
}

// networkSeq returns the sequence number of a network's record, nil when
// there is none.
func (t *Tx) networkSeq(id string) ([]byte, error) {
	v := t.b(bucketNetworks).Get(encodeID(id))
	if v == nil {
		return nil, nil
	}
	seq, _, err := splitNetworkValue(id, v)
	return seq, err
}

// networkIDOf returns the ID of the network with the sequence number.
func (t *Tx) networkIDOf(seq []byte) (string, error) {
	key := t.b(bucketNetworkSeqs).Get(seq)
	if key == nil {
		return "", fmt.Errorf("%w: no network has sequence number %d", ErrCorrupt, seqValue(seq))
	}
	return decodeID(key)
}

// NetworksOn returns the networks (complete and pending) whose parent is
// the named link, in ID order.
func (t *Tx) NetworksOn(parent string) ([]record.Network, error) {
	var out []record.Network
	for _, seq := range indexMembers(t.b(bucketByParent), parent) {
		id, err := t.networkIDOf([]byte(seq))
		if err != nil {
			return nil, fmt.Errorf("parent index of %s: %w", parent, err)
		}
		n, ok, err := t.Network(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: parent index of %s names network %s, which has no record", ErrCorrupt, parent, id)
		}
		out = append(out, n)
	}
	// The index holds sequence numbers, in creation order.
	slices.SortFunc(out, func(a, b record.Network) int { return strings.Compare(a.ID, b.ID) })
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

// PutNetwork writes the network record and its index entries. A new
// network gets the next sequence number.
func (t *Tx) PutNetwork(n record.Network) error {
	key := encodeID(n.ID)
	var seq []byte
	if v := t.b(bucketNetworks).Get(key); v != nil {
		old, oldSeq, err := decodeNetwork(n.ID, v)
		if err != nil {
			return err
		}
		seq = bytes.Clone(oldSeq)
		if old.Parent != n.Parent {
			if err := indexRemove(t.b(bucketByParent), old.Parent, string(seq)); err != nil {
				return fmt.Errorf("move network %s off parent %s: %w", n.ID, old.Parent, err)
			}
		}
	} else {
		next, err := t.b(bucketNetworkSeqs).NextSequence()
		if err != nil {
			return fmt.Errorf("number network %s: %w", n.ID, err)
		}
		seq = encodeSeq(next)
		if err := t.put(t.b(bucketNetworkSeqs), seq, key); err != nil {
			return fmt.Errorf("number network %s: %w", n.ID, err)
		}
	}
	if err := t.setAdd(t.b(bucketByParent), n.Parent, string(seq)); err != nil {
		return fmt.Errorf("index network %s by parent %s: %w", n.ID, n.Parent, err)
	}
	var err error
	if n.Pending != nil {
		err = t.b(bucketPending).Put(key, nil)
	} else {
		err = t.b(bucketPending).Delete(key)
	}
	if err != nil {
		return fmt.Errorf("pending mark of network %s: %w", n.ID, err)
	}
	v, err := networkValue(seq, n)
	if err != nil {
		return err
	}
	return t.put(t.b(bucketNetworks), key, v)
}

// DeleteNetwork removes the network, its endpoints and their index entries.
// A missing network is not an error.
func (t *Tx) DeleteNetwork(id string) error {
	key := encodeID(id)
	v := t.b(bucketNetworks).Get(key)
	if v == nil {
		return nil
	}
	n, seq, err := decodeNetwork(id, v)
	if err != nil {
		return err
	}
	seq = bytes.Clone(seq)
	if err := t.deleteEndpointsOf(id, seq); err != nil {
		return err
	}
	if err := indexRemove(t.b(bucketByParent), n.Parent, string(seq)); err != nil {
		return fmt.Errorf("unindex network %s from parent %s: %w", id, n.Parent, err)
	}
	for _, del := range []struct {
		b *bolt.Bucket
		k []byte
	}{{t.b(bucketPending), key}, {t.b(bucketNetworkSeqs), seq}, {t.b(bucketNetworks), key}} {
		if err := del.b.Delete(del.k); err != nil {
			return fmt.Errorf("delete network %s: %w", id, err)
		}
	}
	return nil
}

// Pending returns the networks whose creation has not finished.
func (t *Tx) Pending() ([]record.Network, error) {
	var out []record.Network
	err := t.b(bucketPending).ForEach(func(k, _ []byte) error {
		id, err := decodeID(k)
		if err != nil {
			return fmt.Errorf("pending mark: %w", err)
		}
		n, ok, err := t.Network(id)
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

// ForEachNetwork calls fn for every network in key order: ID order among
// Docker's (hexadecimal) IDs and among other IDs, Docker's first.
func (t *Tx) ForEachNetwork(fn func(record.Network) error) error {
	return t.forEachNetwork(func([]byte) bool { return true }, fn)
}

// ForEachNetworkWithHostAddress calls fn for every network whose record
// has a host address, in key order, decoding only those.
func (t *Tx) ForEachNetworkWithHostAddress(fn func(record.Network) error) error {
	return t.forEachNetwork(func(raw []byte) bool { return bytes.Contains(raw, []byte(`"host_address":`)) }, fn)
}

// forEachNetwork decodes the networks whose JSON passes want.
func (t *Tx) forEachNetwork(want func(raw []byte) bool, fn func(record.Network) error) error {
	return t.b(bucketNetworks).ForEach(func(k, v []byte) error {
		id, err := decodeID(k)
		if err != nil {
			return fmt.Errorf("network record: %w", err)
		}
		if _, raw, err := splitNetworkValue(id, v); err != nil || !want(raw) {
			return err
		}
		n, _, err := decodeNetwork(id, v)
		if err != nil {
			return err
		}
		return fn(n)
	})
}

// Viewer reads the state file (*DB).
type Viewer interface {
	View(func(*Tx) error) error
}

// ReadNetwork reads one network record in a read transaction of its own;
// nil when there is none.
func ReadNetwork(v Viewer, id string) (*record.Network, error) {
	var n record.Network
	var ok bool
	if err := v.View(func(tx *Tx) (err error) {
		n, ok, err = tx.Network(id)
		return err
	}); err != nil || !ok {
		return nil, err
	}
	return &n, nil
}
