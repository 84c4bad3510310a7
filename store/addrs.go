package store

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// The address index (since schema 5): every address of every endpoint
// (its IPv4 and IPv6, static or leased) under its network, so that "which
// endpoint of this network holds this address" is one prefix read, not a
// scan of the network's endpoints. A key is the network's sequence number,
// the address's 16 bytes (an IPv4 address in its IPv4-mapped form) and the
// endpoint's encoded ID; the value is empty. The sequence number is
// prefix-free and the address of fixed length, so a network's entries for
// one address are exactly the keys that start with both.

// addrIndexKey is the index key of one address of the endpoint with key.
func addrIndexKey(seq []byte, addr netip.Addr, endpointKey []byte) []byte {
	a := addr.As16()
	k := make([]byte, 0, len(endpointKey)+16)
	k = append(k, seq...)
	k = append(k, a[:]...)
	return append(k, endpointKey[len(seq):]...)
}

// endpointAddrs are the addresses an endpoint record holds.
func endpointAddrs(ep record.Endpoint) []netip.Addr {
	var out []netip.Addr
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(a); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// indexAddrs adds (add) or removes the address index entries of the
// endpoint with key.
func (t *Tx) indexAddrs(ep record.Endpoint, key []byte, add bool) error {
	seq, _, err := splitSeq(key)
	if err != nil {
		return err
	}
	b := t.b(bucketAddrs)
	for _, a := range endpointAddrs(ep) {
		k := addrIndexKey(seq, a, key)
		if add {
			err = t.put(b, k, nil)
		} else {
			err = b.Delete(k)
		}
		if err != nil {
			return fmt.Errorf("index address %s of endpoint %s: %w", a, ep.ID, err)
		}
	}
	return nil
}

// EndpointsWithAddr returns the IDs of the network's endpoints whose
// record holds addr (IPv4 or IPv6, static or leased), from the address
// index: one prefix read.
func (t *Tx) EndpointsWithAddr(networkID string, addr netip.Addr) ([]string, error) {
	seq, err := t.networkSeq(networkID)
	if err != nil || seq == nil || !addr.IsValid() {
		return nil, err
	}
	prefix := addrIndexKey(seq, addr.Unmap(), seq)
	var ids []string
	c := t.b(bucketAddrs).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		id, err := decodeID(k[len(prefix):])
		if err != nil {
			return nil, fmt.Errorf("address index entry of %s in network %s: %w", addr, networkID, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// deleteAddrsOf removes the address index entries of the network with the
// sequence number.
func (t *Tx) deleteAddrsOf(seq []byte) error {
	var keys [][]byte
	c := t.b(bucketAddrs).Cursor()
	for k, _ := c.Seek(seq); k != nil && bytes.HasPrefix(k, seq); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := t.b(bucketAddrs).Delete(k); err != nil {
			return fmt.Errorf("unindex the addresses of network %d: %w", seqValue(seq), err)
		}
	}
	return nil
}

// migrateAddrs is the schema 4 -> 5 step: it indexes the addresses of
// every endpoint on record. The keys are sorted before they are written
// (a new bucket is one node until the commit: see migrateCompact).
func migrateAddrs(tx *bolt.Tx) error {
	b, err := tx.CreateBucket(bucketAddrs)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketAddrs, err)
	}
	var index [][]byte
	c := tx.Bucket(bucketEndpoints).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		seq, rest, err := splitSeq(k)
		if err != nil {
			return fmt.Errorf("endpoint key %x: %w", k, err)
		}
		id, err := decodeID(rest)
		if err != nil {
			return fmt.Errorf("endpoint key %x of network %d: %w", k, seqValue(seq), err)
		}
		ep, err := decodeEndpoint("", id, v)
		if err != nil {
			return err
		}
		for _, a := range endpointAddrs(ep) {
			index = append(index, addrIndexKey(seq, a, k))
		}
	}
	slices.SortFunc(index, bytes.Compare)
	t := &Tx{tx: tx}
	for _, k := range index {
		if err := t.put(b, k, nil); err != nil {
			return fmt.Errorf("index the endpoints' addresses: %w", err)
		}
	}
	return nil
}
