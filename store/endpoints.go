package store

import (
	"bytes"
	"fmt"

	"github.com/underlay-net/underlay/store/record"
)

// Endpoint returns one endpoint of a network.
func (t *Tx) Endpoint(networkID, id string) (record.Endpoint, bool, error) {
	seq, err := t.networkSeq(networkID)
	if err != nil || seq == nil {
		return record.Endpoint{}, false, err
	}
	v := t.b(bucketEndpoints).Get(endpointKey(seq, id))
	if v == nil {
		return record.Endpoint{}, false, nil
	}
	ep, err := decodeEndpoint(networkID, id, v)
	return ep, err == nil, err
}

// Endpoints returns the endpoints of a network in key order (as
// ForEachNetwork): the keys that start with its sequence number.
func (t *Tx) Endpoints(networkID string) ([]record.Endpoint, error) {
	seq, err := t.networkSeq(networkID)
	if err != nil || seq == nil {
		return nil, err
	}
	var out []record.Endpoint
	c := t.b(bucketEndpoints).Cursor()
	for k, v := c.Seek(seq); k != nil && bytes.HasPrefix(k, seq); k, v = c.Next() {
		id, err := decodeID(k[len(seq):])
		if err != nil {
			return nil, fmt.Errorf("endpoint of network %s: %w", networkID, err)
		}
		ep, err := decodeEndpoint(networkID, id, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	return out, nil
}

// EndpointByLink returns the endpoint whose host link has the given name.
func (t *Tx) EndpointByLink(link string) (record.Endpoint, bool, error) {
	ep, seq, key, err := t.linkTarget(link)
	if err != nil || key == nil {
		return record.Endpoint{}, false, err
	}
	if ep.NetworkID, err = t.networkIDOf(seq); err != nil {
		return record.Endpoint{}, false, fmt.Errorf("endpoint %s of link %s: %w", ep.ID, link, err)
	}
	return ep, true, nil
}

// linkTarget finds the endpoint that has the link, through the link
// index: its record (without NetworkID), its network's sequence number and
// its key; a nil key when there is none. The index holds the start of the
// endpoint's key (keys.go, linkRef), so this reads the few records that
// share it, normally one.
func (t *Tx) linkTarget(link string) (ep record.Endpoint, seq, key []byte, err error) {
	ref := t.b(bucketLinks).Get([]byte(link))
	if ref == nil {
		return record.Endpoint{}, nil, nil, nil
	}
	if seq, _, err = splitSeq(ref); err != nil {
		return record.Endpoint{}, nil, nil, fmt.Errorf("link index entry %s: %w", link, err)
	}
	c := t.b(bucketEndpoints).Cursor()
	for k, v := c.Seek(ref); k != nil && bytes.HasPrefix(k, ref); k, v = c.Next() {
		id, err := decodeID(k[len(seq):])
		if err != nil {
			return record.Endpoint{}, nil, nil, fmt.Errorf("endpoint of link %s: %w", link, err)
		}
		if ep, err = decodeEndpoint("", id, v); err != nil {
			return record.Endpoint{}, nil, nil, err
		}
		if ep.Link == link {
			return ep, seq, k, nil
		}
	}
	return record.Endpoint{}, nil, nil, nil
}

// PutEndpoint writes the endpoint record; its network must exist. The link
// name must not belong to another endpoint.
func (t *Tx) PutEndpoint(ep record.Endpoint) error {
	seq, err := t.networkSeq(ep.NetworkID)
	if err != nil {
		return err
	} else if seq == nil {
		return fmt.Errorf("%w: %s", ErrNoNetwork, ep.NetworkID)
	}
	key := endpointKey(seq, ep.ID)
	if other, _, otherKey, err := t.linkTarget(ep.Link); err != nil {
		return err
	} else if otherKey != nil && !bytes.Equal(otherKey, key) {
		return fmt.Errorf("link name %s already belongs to endpoint %s", ep.Link, other.ID)
	}
	ref, err := linkRef(key)
	if err != nil {
		return err
	}
	if v := t.b(bucketEndpoints).Get(key); v != nil {
		old, err := decodeEndpoint(ep.NetworkID, ep.ID, v)
		if err != nil {
			return err
		}
		if old.Link != ep.Link {
			if err := t.unindexLink(old.Link, key); err != nil {
				return err
			}
		}
		if err := t.indexAddrs(old, key, false); err != nil {
			return err
		}
	}
	if err := t.indexAddrs(ep, key, true); err != nil {
		return err
	}
	v, err := encodeEndpoint(ep)
	if err != nil {
		return err
	}
	if err := t.put(t.b(bucketLinks), []byte(ep.Link), ref); err != nil {
		return fmt.Errorf("index link %s of endpoint %s: %w", ep.Link, ep.ID, err)
	}
	if err := t.put(t.b(bucketEndpoints), key, v); err != nil {
		return fmt.Errorf("write endpoint %s of network %s: %w", ep.ID, ep.NetworkID, err)
	}
	return nil
}

// DeleteEndpoint removes an endpoint record; a missing one is not an error.
func (t *Tx) DeleteEndpoint(networkID, id string) error {
	seq, err := t.networkSeq(networkID)
	if err != nil || seq == nil {
		return err
	}
	key := endpointKey(seq, id)
	v := t.b(bucketEndpoints).Get(key)
	if v == nil {
		return nil
	}
	ep, err := decodeEndpoint(networkID, id, v)
	if err != nil {
		return err
	}
	if err := t.unindexLink(ep.Link, key); err != nil {
		return err
	}
	if err := t.indexAddrs(ep, key, false); err != nil {
		return err
	}
	if err := t.b(bucketEndpoints).Delete(key); err != nil {
		return fmt.Errorf("delete endpoint %s of network %s: %w", id, networkID, err)
	}
	return nil
}

// unindexLink removes the link index entry of the endpoint with the key,
// unless the entry names another endpoint.
func (t *Tx) unindexLink(link string, key []byte) error {
	ref, err := linkRef(key)
	if err != nil {
		return err
	}
	if !bytes.Equal(t.b(bucketLinks).Get([]byte(link)), ref) {
		return nil
	}
	if err := t.b(bucketLinks).Delete([]byte(link)); err != nil {
		return fmt.Errorf("unindex link %s: %w", link, err)
	}
	return nil
}

// deleteEndpointsOf removes the endpoints of the network with the
// sequence number, and their links from the index.
func (t *Tx) deleteEndpointsOf(networkID string, seq []byte) error {
	var keys [][]byte
	c := t.b(bucketEndpoints).Cursor()
	for k, v := c.Seek(seq); k != nil && bytes.HasPrefix(k, seq); k, v = c.Next() {
		id, err := decodeID(k[len(seq):])
		if err != nil {
			return fmt.Errorf("endpoint of network %s: %w", networkID, err)
		}
		ep, err := decodeEndpoint(networkID, id, v)
		if err != nil {
			return err
		}
		if err := t.unindexLink(ep.Link, k); err != nil {
			return err
		}
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := t.b(bucketEndpoints).Delete(k); err != nil {
			return fmt.Errorf("delete the endpoints of network %s: %w", networkID, err)
		}
	}
	return t.deleteAddrsOf(seq)
}
