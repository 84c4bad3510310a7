package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// putV3Network and putV3Endpoint write records as schemas 1 to 3 did (the
// code of those versions' PutNetwork and PutEndpoint, on their buckets).
func putV3Network(tx *bolt.Tx, n record.Network) error {
	raw, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if err := indexAdd(tx.Bucket(v3ByParent), n.Parent, n.ID); err != nil {
		return err
	}
	if n.Pending != nil {
		if err := tx.Bucket(v3Pending).Put([]byte(n.ID), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(v3Networks).Put([]byte(n.ID), raw)
}

func putV3Endpoint(tx *bolt.Tx, ep record.Endpoint) error {
	b, err := tx.Bucket(v3Endpoints).CreateBucketIfNotExists([]byte(ep.NetworkID))
	if err != nil {
		return err
	}
	ref, _ := json.Marshal(struct{ N, E string }{ep.NetworkID, ep.ID})
	if err := tx.Bucket(v3Links).Put([]byte(ep.Link), ref); err != nil {
		return err
	}
	raw, err := json.Marshal(ep)
	if err != nil {
		return err
	}
	return b.Put([]byte(ep.ID), raw)
}

// writeV3 makes a schema 3 file at path holding the networks and
// endpoints, and runs more on the same transaction.
func writeV3(t *testing.T, path string, nets []record.Network, eps []record.Endpoint, more func(*bolt.Tx) error) {
	t.Helper()
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		for v := 0; v < 3; v++ {
			if err := migrations[v](tx); err != nil {
				return err
			}
		}
		for _, n := range nets {
			if err := putV3Network(tx, n); err != nil {
				return err
			}
		}
		for _, ep := range eps {
			if err := putV3Endpoint(tx, ep); err != nil {
				return err
			}
		}
		if err := more(tx); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Put(keyInstance, []byte("inst3")); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("3"))
	})
	if cerr := raw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func hexID(c byte) string { return strings.Repeat(string(c), 60) + "0123" }

// v3State is a schema 3 state with every kind of record: Docker (hex)
// and other IDs, a pending network, pools of both families, options, a
// host address; endpoints with leases, sandboxes, IPv6, MACs and
// addresses in non-canonical forms, and an alternative link name.
func v3State() ([]record.Network, []record.Endpoint) {
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	hexA, hexB, hexE := hexID('a'), hexID('b'), hexID('e')
	nets := []record.Network{
		{ID: hexA, Type: "macvlan", Parent: "eth0", Mode: "bridge", MTU: 1400,
			IPv4:        []record.Pool{{Subnet: "198.18.1.0/24", Gateway: "198.18.1.1"}},
			IPv6:        []record.Pool{{Subnet: "2001:db8::/64", Gateway: "2001:db8::1"}},
			HostAddress: "198.18.1.2", Options: map[string]string{"parent": "eth0", "dhcp": "true"}, Created: created},
		{ID: hexB, Type: "ipvlan", Parent: "eth0", Mode: "l2", Flag: "bridge",
			Pending: &record.Reservation{Token: "tok", Deadline: created.Add(time.Minute)}},
		{ID: "net-text", Type: "macvlan", Parent: "uli1", Mode: "bridge", Internal: true},
	}
	lease := &record.Lease{Addr: "198.18.1.50/24", Router: "198.18.1.1", ServerID: "198.18.1.1", ClientID: "01aa",
		Routes:   []record.LeaseRoute{{Dst: "10.0.0.0/8", Gateway: "198.18.1.254"}},
		Acquired: created, T1: created.Add(time.Hour), T2: created.Add(2 * time.Hour), Expiry: created.Add(3 * time.Hour)}
	eps := []record.Endpoint{
		{NetworkID: hexA, ID: hexE, Link: "ule" + hexE[:12], MAC: "02:42:c6:12:00:01", IPv4: "198.18.1.50/24", IPv6: "2001:db8::50/64",
			Sandbox: "/var/run/docker/netns/0123456789ab", Boot: "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Lease: lease},
		{NetworkID: hexA, ID: hexID('f'), Link: "ule9f8e7d6c5b4a", MAC: "02:42:C6:12:00:02", IPv4: "198.18.1.51/24", IPv6: "2001:DB8::51/64"},
		{NetworkID: "net-text", ID: "e1", Link: "ule1"},
		// Two IDs alike in their first characters (the link index keeps
		// only those).
		{NetworkID: "net-text", ID: "endpoint-long-1", Link: "lnk-a", IPv4: "10.0.0.2/8"},
		{NetworkID: "net-text", ID: "endpoint-long-2", Link: "lnk-b"},
	}
	return nets, eps
}
