package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sticky addresses by name: the address the IPAM last gave each endpoint
// name (engines that send com.docker.network.endpoint.name with
// RequestAddress) in each subnet, so that the name gets it again when it
// comes back, on the same pool or on a re-created one with the same
// subnet.
//
// The bucket is new in schema 4 files and needs no schema bump: it is
// created by the first write that needs it, and read as empty when it is
// not there, so a file without it is a file with no names yet. An older
// underlay of schema 4 leaves it alone (nothing reads or lists the
// top-level buckets it does not know, and compaction copies every
// bucket), so a downgrade keeps the names for the next upgrade.
//
//	ipam-names   space + "|" + subnet -> {"n" + 0 + name -> IPAMName as JSON,
//	                                      "a" + 0 + address -> name}
var bucketIPAMNames = []byte("ipam-names")

const (
	nameKeyPrefix = "n\x00"
	addrKeyPrefix = "a\x00"
)

// IPAMName is the address a name was last given in a subnet.
type IPAMName struct {
	// Space, Subnet and Name are the record's key (not in its value).
	Space  string `json:"-"`
	Subnet string `json:"-"`
	Name   string `json:"-"`
	// Address is a plain address of Subnet.
	Address string `json:"address"`
	// Given is when the address was last handed out to the name.
	Given time.Time `json:"given"`
	// Released is when it was last released after that (zero while held
	// or never released).
	Released time.Time `json:"released,omitzero"`
}

// LastUsed is when the name last held its address: its release, or when
// it was given if it was not released since.
func (n IPAMName) LastUsed() time.Time {
	if n.Released.After(n.Given) {
		return n.Released
	}
	return n.Given
}

func subnetKey(space, subnet string) []byte { return []byte(space + "|" + subnet) }

// names is a subnet's nested bucket; nil when it has none (or, in a write
// transaction with create, a new one).
func (t *Tx) names(space, subnet string, create bool) (*bolt.Bucket, error) {
	top := t.b(bucketIPAMNames)
	if top == nil {
		if !create {
			return nil, nil
		}
		var err error
		if top, err = t.tx.CreateBucketIfNotExists(bucketIPAMNames); err != nil {
			return nil, err
		}
	}
	if !create {
		return top.Bucket(subnetKey(space, subnet)), nil
	}
	return top.CreateBucketIfNotExists(subnetKey(space, subnet))
}

// IPAMName returns the record of a name in a subnet.
func (t *Tx) IPAMName(space, subnet, name string) (IPAMName, bool, error) {
	b, err := t.names(space, subnet, false)
	if err != nil || b == nil {
		return IPAMName{}, false, err
	}
	return decodeName(space, subnet, name, b.Get([]byte(nameKeyPrefix+name)))
}

// IPAMNameOf returns the record of the name an address of a subnet is
// remembered for.
func (t *Tx) IPAMNameOf(space, subnet, addr string) (IPAMName, bool, error) {
	b, err := t.names(space, subnet, false)
	if err != nil || b == nil {
		return IPAMName{}, false, err
	}
	name := b.Get([]byte(addrKeyPrefix + addr))
	if name == nil {
		return IPAMName{}, false, nil
	}
	n, ok, err := decodeName(space, subnet, string(name), b.Get(append([]byte(nameKeyPrefix), name...)))
	if err == nil && !ok {
		return IPAMName{}, false, fmt.Errorf("%w: address %s of subnet %s is remembered for name %q, which has no record", ErrCorrupt, addr, subnet, name)
	}
	return n, ok, err
}

func decodeName(space, subnet, name string, raw []byte) (IPAMName, bool, error) {
	if raw == nil {
		return IPAMName{}, false, nil
	}
	var n IPAMName
	if err := json.Unmarshal(raw, &n); err != nil {
		return IPAMName{}, false, fmt.Errorf("%w: IPAM name record %q of subnet %s: %w", ErrCorrupt, name, subnet, err)
	}
	n.Space, n.Subnet, n.Name = space, subnet, name
	return n, true, nil
}

// PutIPAMName records that a name has an address: the name's earlier
// address and any other name's record of this address are forgotten
// (an address is remembered for one name only).
func (t *Tx) PutIPAMName(n IPAMName) error {
	if n.Name == "" || n.Address == "" || n.Subnet == "" {
		return fmt.Errorf("IPAM name record needs a name, an address and a subnet: got %q, %q, %q", n.Name, n.Address, n.Subnet)
	}
	if strings.ContainsRune(n.Name, 0) {
		return fmt.Errorf("IPAM name %q holds a NUL byte: endpoint names cannot", n.Name)
	}
	if err := t.DeleteIPAMName(n.Space, n.Subnet, n.Name); err != nil {
		return err
	}
	if other, ok, err := t.IPAMNameOf(n.Space, n.Subnet, n.Address); err != nil {
		return err
	} else if ok {
		if err := t.DeleteIPAMName(n.Space, n.Subnet, other.Name); err != nil {
			return err
		}
	}
	b, err := t.names(n.Space, n.Subnet, true)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode IPAM name record %q: %w", n.Name, err)
	}
	if err := b.Put([]byte(nameKeyPrefix+n.Name), raw); err != nil {
		return err
	}
	return b.Put([]byte(addrKeyPrefix+n.Address), []byte(n.Name))
}

// DeleteIPAMName forgets a name of a subnet; a missing one is not an
// error. A subnet left without names loses its bucket.
func (t *Tx) DeleteIPAMName(space, subnet, name string) error {
	old, ok, err := t.IPAMName(space, subnet, name)
	if err != nil || !ok {
		return err
	}
	b, err := t.names(space, subnet, false)
	if err != nil {
		return err
	}
	if err := b.Delete([]byte(nameKeyPrefix + name)); err != nil {
		return err
	}
	if string(b.Get([]byte(addrKeyPrefix+old.Address))) == name {
		if err := b.Delete([]byte(addrKeyPrefix + old.Address)); err != nil {
			return err
		}
	}
	if k, _ := b.Cursor().First(); k == nil {
		return t.b(bucketIPAMNames).DeleteBucket(subnetKey(space, subnet))
	}
	return nil
}

// IPAMNames returns the names of a subnet, in name order.
func (t *Tx) IPAMNames(space, subnet string) ([]IPAMName, error) {
	b, err := t.names(space, subnet, false)
	if err != nil || b == nil {
		return nil, err
	}
	var out []IPAMName
	c := b.Cursor()
	for k, v := c.Seek([]byte(nameKeyPrefix)); k != nil && strings.HasPrefix(string(k), nameKeyPrefix); k, v = c.Next() {
		n, _, err := decodeName(space, subnet, string(k[len(nameKeyPrefix):]), v)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// AllIPAMNames returns the names of every subnet, by space, subnet and
// name.
func (t *Tx) AllIPAMNames() ([]IPAMName, error) {
	top := t.b(bucketIPAMNames)
	if top == nil {
		return nil, nil
	}
	var out []IPAMName
	err := top.ForEachBucket(func(k []byte) error {
		space, subnet, ok := strings.Cut(string(k), "|")
		if !ok {
			return fmt.Errorf("%w: IPAM names bucket %q is not space|subnet", ErrCorrupt, k)
		}
		names, err := t.IPAMNames(space, subnet)
		out = append(out, names...)
		return err
	})
	return out, err
}
