package store

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/store/record"
)

// TestEndpointByLinkAmongAlikeIDs: the link index keeps only the start of
// an endpoint's ID; endpoints whose IDs share it, or that share an ID in
// two networks, are still told apart, and an entry whose endpoint moved to
// another link no longer answers.
func TestEndpointByLinkAmongAlikeIDs(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	mustUpdate(t, db, func(tx *Tx) error {
		for _, n := range []string{"n1", "n2"} {
			if err := tx.PutNetwork(network(n, "eth0")); err != nil {
				return err
			}
		}
		for i, link := range []string{"la", "lb", "lc"} {
			if err := tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: fmt.Sprint("endpoint-long-", i), Link: link}); err != nil {
				return err
			}
		}
		return tx.PutEndpoint(record.Endpoint{NetworkID: "n2", ID: "endpoint-long-0", Link: "ld"})
	})
	want := map[string]string{"la": "n1/endpoint-long-0", "lb": "n1/endpoint-long-1", "lc": "n1/endpoint-long-2", "ld": "n2/endpoint-long-0"}
	check := func() {
		t.Helper()
		mustView(t, db, func(tx *Tx) error {
			for link, w := range want {
				ep, ok, err := tx.EndpointByLink(link)
				got := ""
				if ok {
					got = ep.NetworkID + "/" + ep.ID
				}
				if err != nil || got != w || (ok && ep.Link != link) {
					return fmt.Errorf("EndpointByLink(%s) = %+v %v %v, want %q", link, ep, ok, err, w)
				}
			}
			return nil
		})
	}
	check()

	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteEndpoint("n1", "endpoint-long-0") })
	want["la"] = ""
	check()

	// A new link for an endpoint frees its old one.
	mustUpdate(t, db, func(tx *Tx) error {
		return tx.PutEndpoint(record.Endpoint{NetworkID: "n1", ID: "endpoint-long-1", Link: "lb2"})
	})
	want["lb"], want["lb2"] = "", "n1/endpoint-long-1"
	check()
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutEndpoint(record.Endpoint{NetworkID: "n2", ID: "other", Link: "lb"}) })
	want["lb"] = "n2/other"
	check()

	err := db.Update(func(tx *Tx) error { return tx.PutEndpoint(record.Endpoint{NetworkID: "n2", ID: "x", Link: "lc"}) })
	if err == nil || !strings.Contains(err.Error(), "endpoint-long-2") {
		t.Fatalf("a link of another network's endpoint was taken: %v", err)
	}

	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork("n1") })
	want["lb2"], want["lc"] = "", ""
	check()
	mustView(t, db, func(tx *Tx) error {
		eps, err := tx.Endpoints("n2")
		if err != nil || len(eps) != 2 || eps[0].ID != "endpoint-long-0" || eps[1].ID != "other" {
			return fmt.Errorf("endpoints of n2 after n1 was deleted: %+v %v", eps, err)
		}
		if c, err := tx.Counts(); err != nil || c.Endpoints != 2 || c.EndpointLinks != 2 {
			return fmt.Errorf("counts %+v %v", c, err)
		}
		return nil
	})
}

// TestNetworkSequenceNumbersAreNotReused: a network created after another
// was deleted gets a new number, so no endpoint key of the old one could
// name it; re-writing a network keeps its number.
func TestNetworkSequenceNumbersAreNotReused(t *testing.T) {
	db := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer db.Close()
	seqOf := func(id string) (seq uint64) {
		t.Helper()
		mustView(t, db, func(tx *Tx) error {
			s, err := tx.networkSeq(id)
			if err == nil && s == nil {
				err = fmt.Errorf("no network %s", id)
			}
			if err == nil {
				seq = seqValue(s)
			}
			return err
		})
		return seq
	}
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(network("n1", "eth0")) })
	first := seqOf("n1")
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(network("n1", "eth1")) })
	if seqOf("n1") != first {
		t.Fatal("re-writing a network changed its sequence number")
	}
	mustUpdate(t, db, func(tx *Tx) error { return tx.DeleteNetwork("n1") })
	mustUpdate(t, db, func(tx *Tx) error { return tx.PutNetwork(network("n1", "eth0")) })
	if again := seqOf("n1"); again <= first {
		t.Fatalf("sequence number %d again after %d", again, first)
	}
}
