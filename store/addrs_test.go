package store

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// withAddr is EndpointsWithAddr's answer for one address.
func withAddr(t *testing.T, db *DB, network, addr string) []string {
	t.Helper()
	var ids []string
	mustView(t, db, func(tx *Tx) (err error) {
		ids, err = tx.EndpointsWithAddr(network, netip.MustParseAddr(addr))
		return err
	})
	return ids
}

// The address index follows every write of an endpoint: its addresses of
// both families, static or leased, found by network and address; a changed
// address moves, a deleted endpoint or network leaves nothing behind.
func TestAddressIndex(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error {
		for _, n := range []record.Network{{ID: "n1", Type: "macvlan", Parent: "eth0"}, {ID: "n2", Type: "macvlan", Parent: "eth0"}} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for _, ep := range []record.Endpoint{
			{NetworkID: "n1", ID: "e1", Link: "l1", IPv4: "198.18.2.100/24", IPv6: "2001:db8:2::100/64"},
			{NetworkID: "n1", ID: "e2", Link: "l2", IPv4: "198.18.2.101/24", Lease: &record.Lease{Addr: "198.18.2.101/24"}},
			{NetworkID: "n2", ID: "e3", Link: "l3", IPv6: "2001:db8:2::100/128", Lease6: &record.Lease6{Addr: "2001:db8:2::100"}},
			{NetworkID: "n2", ID: "e4", Link: "l4"},
		} {
			if err := tx.PutEndpoint(ep); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range []struct {
		network, addr string
		want          []string
	}{
		{"n1", "198.18.2.100", []string{"e1"}},
		{"n1", "2001:db8:2::100", []string{"e1"}},
		{"n1", "198.18.2.101", []string{"e2"}},
		{"n2", "2001:db8:2::100", []string{"e3"}},
		{"n2", "198.18.2.100", nil},
		{"n1", "::ffff:198.18.2.100", []string{"e1"}},
		{"n1", "198.18.2.102", nil},
		{"nx", "198.18.2.100", nil},
	} {
		if got := withAddr(t, db, c.network, c.addr); !reflect.DeepEqual(got, c.want) {
			t.Errorf("endpoints of %s with %s: %v, want %v", c.network, c.addr, got, c.want)
		}
	}
	mustUpdate(t, db, func(tx *Tx) error {
		return tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: "e1", Link: "l1", IPv4: "198.18.2.110/24"})
	})
	if got := withAddr(t, db, "n1", "198.18.2.100"); got != nil {
		t.Errorf("the old address of e1 is still indexed: %v", got)
	}
	if got := withAddr(t, db, "n1", "2001:db8:2::100"); got != nil {
		t.Errorf("the IPv6 address e1 no longer has is still indexed: %v", got)
	}
	if got := withAddr(t, db, "n1", "198.18.2.110"); !reflect.DeepEqual(got, []string{"e1"}) {
		t.Errorf("the new address of e1: %v, want [e1]", got)
	}
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteEndpoint("n1", "e2") })
	if got := withAddr(t, db, "n1", "198.18.2.101"); got != nil {
		t.Errorf("deleted endpoint e2 still indexed: %v", got)
	}
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork("n2") })
	mustView(t, db, func(tx *Tx) error {
		n := 0
		c := tx.b(bucketAddrs).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if n != 1 {
			return fmt.Errorf("%d address index entries after network n2 and endpoint e2 went, want 1 (e1's)", n)
		}
		return nil
	})
}

// TestMigrateFromSchema4 opens a file as schema 4 wrote it (no address
// index) and finds every endpoint's addresses indexed.
func TestMigrateFromSchema4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v4.db")
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := []record.Endpoint{
		{NetworkID: "n1", ID: "e1", Link: "l1", IPv4: "198.18.2.100/24", IPv6: "2001:db8:2::100/64"},
		{NetworkID: "n2", ID: "e2", Link: "l2", IPv4: "198.18.2.100/24"},
		{NetworkID: "n2", ID: "e3", Link: "l3"},
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		for v := 0; v < 4; v++ {
			if err := migrations[v](tx); err != nil {
				return err
			}
		}
		t := &Tx{tx: tx}
		for _, n := range []record.Network{{ID: "n1", Type: "macvlan", Parent: "eth0"}, {ID: "n2", Type: "macvlan", Parent: "eth0"}} {
			if err := t.PutNetwork(n); err != nil {
				return err
			}
		}
		for _, ep := range eps { // as schema 4 wrote them: no address index
			seq, err := t.networkSeq(ep.NetworkID)
			if err != nil {
				return err
			}
			v, err := encodeEndpoint(ep)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketEndpoints).Put(endpointKey(seq, ep.ID), v); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("4"))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, path)
	defer db.Close()
	for _, c := range []struct {
		network, addr string
		want          []string
	}{
		{"n1", "198.18.2.100", []string{"e1"}},
		{"n1", "2001:db8:2::100", []string{"e1"}},
		{"n2", "198.18.2.100", []string{"e2"}},
		{"n2", "2001:db8:2::100", nil},
	} {
		if got := withAddr(t, db, c.network, c.addr); !reflect.DeepEqual(got, c.want) {
			t.Errorf("after migration, endpoints of %s with %s: %v, want %v", c.network, c.addr, got, c.want)
		}
	}
}
