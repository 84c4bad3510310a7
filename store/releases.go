package store

import (
	"encoding/json"
	"fmt"

	"github.com/underlay-net/underlay/store/record"
)

// Leases to give back: a DHCP lease is written here before the daemon may
// lose track of it (right after the server's ACK, before the endpoint's
// record is committed; in the transaction that deletes an endpoint, before
// its RELEASE is sent), and removed once it is recorded or released. A
// start finds here what a kill -9 left between the two and releases it.

var bucketReleases = []byte("lease-releases")

func releaseKey(networkID, endpointID, addr string) []byte {
	return []byte(networkID + "/" + endpointID + "/" + addr)
}

// PutPendingRelease records a lease to give back.
func (t *Tx) PutPendingRelease(r record.PendingRelease) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketReleases)
	if err != nil {
		return err
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return b.Put(releaseKey(r.NetworkID, r.EndpointID, r.Addr()), v)
}

// DeletePendingRelease forgets a lease to give back; a missing one is not
// an error.
func (t *Tx) DeletePendingRelease(networkID, endpointID, addr string) error {
	b := t.b(bucketReleases)
	if b == nil {
		return nil
	}
	return b.Delete(releaseKey(networkID, endpointID, addr))
}

// PendingReleases lists the leases to give back.
func (t *Tx) PendingReleases() ([]record.PendingRelease, error) {
	b := t.b(bucketReleases)
	if b == nil {
		return nil, nil
	}
	var out []record.PendingRelease
	err := b.ForEach(func(k, v []byte) error {
		var r record.PendingRelease
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("%w: pending lease release %q: %w", ErrCorrupt, k, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}
