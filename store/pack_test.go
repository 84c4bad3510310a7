package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// TestPackedFillFollowsTheWrites: a transaction packs a bucket's pages
// full when its new keys come in runs or past the last key, and leaves
// bbolt's default for a key among existing ones or a rewrite.
func TestPackedFillFollowsTheWrites(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	fill := func(fn func(*Tx) error) (eps, links float64) {
		t.Helper()
		mustUpdate(t, db, func(tx *Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			eps, links = tx.b(bucketEndpoints).FillPercent, tx.b(bucketLinks).FillPercent
			return nil
		})
		return eps, links
	}
	ep := func(net string, i int) record.Endpoint {
		return record.Endpoint{NetworkID: net, ID: fmt.Sprintf("e%04d", i), Link: fmt.Sprintf("l%04d", (i*7919)%10000)}
	}
	bulk := func(net string, from int) func(*Tx) error {
		return func(tx *Tx) error {
			if err := tx.PutNetwork(network(net, "eth0")); err != nil {
				return err
			}
			for i := from; i < from+100; i++ {
				if err := tx.PutEndpoint(ep(net, i)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, c := range []struct {
		name       string
		fn         func(*Tx) error
		eps, links float64
	}{
		// Into empty buckets everything is one run, the scattered link
		// names too.
		{"bulk into empty buckets", bulk("n1", 0), packedFill, packedFill},
		// A new network's endpoints go past the last key; their link
		// names land among the existing ones one by one.
		{"bulk of a new network", bulk("n2", 1000), packedFill, bolt.DefaultFillPercent},
		{"one endpoint among others", func(tx *Tx) error { return tx.PutEndpoint(ep("n1", 5000)) }, bolt.DefaultFillPercent, bolt.DefaultFillPercent},
		{"one endpoint past the last", func(tx *Tx) error { return tx.PutEndpoint(ep("n2", 9999)) }, packedFill, bolt.DefaultFillPercent},
		{"rewrite", func(tx *Tx) error {
			e := ep("n1", 5)
			e.Sandbox = "/var/run/docker/netns/x"
			return tx.PutEndpoint(e)
		}, bolt.DefaultFillPercent, bolt.DefaultFillPercent},
	} {
		if eps, links := fill(c.fn); eps != c.eps || links != c.links {
			t.Errorf("%s: fill of endpoints %v, links %v; want %v, %v", c.name, eps, links, c.eps, c.links)
		}
	}
}
