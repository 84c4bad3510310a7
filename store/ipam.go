package store

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// The IPAM driver's state: the pools it handed out and the addresses it
// allocated in each. Since schema 3.

var (
	bucketIPAMPools = []byte("ipam-pools")
	// pool ID -> set of allocated addresses.
	bucketIPAMAddrs = []byte("ipam-addresses")
)

// IPAMPool is one pool underlay's IPAM handed out.
type IPAMPool struct {
	// ID is the PoolID Docker passes back.
	ID string `json:"id"`
	// Space is the address space it was requested in.
	Space string `json:"space"`
	// Prefix is the pool in canonical CIDR form.
	Prefix string `json:"prefix"`
	// Range is the SubPool (--ip-range) addresses are handed out from.
	Range string `json:"range,omitempty"`
	// Parent is the parent IPAM option: pools on different parents may
	// overlap (different wires); a pool of a parent is its LAN.
	Parent string `json:"parent,omitempty"`
	// Gateway is the LAN's gateway of a parent pool, a plain address.
	Gateway string `json:"gateway,omitempty"`
	// Auto is set for pools underlay picked itself.
	Auto bool `json:"auto,omitempty"`
	// Pending is set on an auto pool until Docker confirms it (its first
	// address, or a CreateNetwork naming it); expired, it is free again.
	Pending *record.Reservation `json:"pending,omitempty"`
	// Created is when the pool was handed out.
	Created time.Time `json:"created,omitzero"`
	// Probe is --ipam-opt address_probe as a Go duration ("0s": off; ""
	// when not given). A field an older underlay ignores (JSON).
	Probe string `json:"probe,omitempty"`
	// DHCP: the pool's addresses are leased from the LAN's DHCP server of
	// their family on Parent (--ipam-opt dhcp=true for an IPv4 pool,
	// dhcpv6=true for an IPv6 one), each with an IPAMLease.
	DHCP bool `json:"dhcp,omitempty"`
	// NoHostname: the leases do not tell the LAN the container's name
	// (--ipam-opt dhcp_hostname=false).
	NoHostname bool `json:"no_hostname,omitempty"`
	// FQDN: the DHCP leases send the host name as option 81 too
	// (--ipam-opt dhcp_fqdn=true).
	FQDN bool `json:"fqdn,omitempty"`
}

// IPAMLease is the DHCP lease of an address of a DHCP pool: whom it was
// leased for and with what, kept as the address's value (an older
// underlay sees an allocated address).
type IPAMLease struct {
	// Name is the endpoint's name it was leased for; "" when the engine
	// sent none.
	Name string `json:"name,omitempty"`
	// MAC is the client hardware address it was leased with: the name's
	// MAC (lanmac.NameMAC), or a random one without a name. The driver
	// gives the endpoint this MAC.
	MAC string `json:"mac"`
	// Hostname is the host name as sent (DHCP option 12, DHCPv6 option
	// 39); "" for none.
	Hostname string `json:"hostname,omitempty"`
	// Lease is a DHCP lease as the server acknowledged it (its ClientID
	// is option 61 as sent); Lease6 a DHCPv6 one (with its DUID and
	// IAID). One of them is set.
	Lease  *record.Lease  `json:"lease,omitempty"`
	Lease6 *record.Lease6 `json:"lease6,omitempty"`
	// NetworkID and EndpointID are the endpoint that took the lease over
	// (the driver renews it and releases it at DeleteEndpoint); empty
	// until then, and the IPAM releases it itself at ReleaseAddress.
	NetworkID  string `json:"network_id,omitempty"`
	EndpointID string `json:"endpoint_id,omitempty"`
}

// Expired reports whether the pool is an unconfirmed reservation past its
// deadline at now.
func (p IPAMPool) Expired(now time.Time) bool {
	return p.Pending != nil && !now.Before(p.Pending.Deadline)
}

// IPAMPools returns every pool, in ID order.
func (t *Tx) IPAMPools() ([]IPAMPool, error) {
	var out []IPAMPool
	err := t.b(bucketIPAMPools).ForEach(func(k, v []byte) error {
		var p IPAMPool
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("%w: IPAM pool record %q: %w", ErrCorrupt, k, err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// IPAMPool returns one pool.
func (t *Tx) IPAMPool(id string) (IPAMPool, bool, error) {
	return get[IPAMPool](t.b(bucketIPAMPools), id)
}

// PutIPAMPool writes a pool record.
func (t *Tx) PutIPAMPool(p IPAMPool) error {
	return putJSON(t.b(bucketIPAMPools), p.ID, p)
}

// DeleteIPAMPool removes a pool and its addresses; a missing one is not an
// error.
func (t *Tx) DeleteIPAMPool(id string) error {
	if t.b(bucketIPAMAddrs).Bucket([]byte(id)) != nil {
		if err := t.b(bucketIPAMAddrs).DeleteBucket([]byte(id)); err != nil {
			return err
		}
	}
	return t.b(bucketIPAMPools).Delete([]byte(id))
}

// ConfirmIPAMPools clears the reservation of every pending pool of the
// address space with the prefix (a CreateNetwork named it, with its IPAM
// address space: a network of another IPAM driver on the same prefix
// confirms nothing). The prefix is compared in canonical
// form, so 172.16.0.1/24 confirms the pool 172.16.0.0/24.
func (t *Tx) ConfirmIPAMPools(space, prefix string) error {
	pools, err := t.IPAMPools()
	if err != nil {
		return err
	}
	if p, err := netip.ParsePrefix(prefix); err == nil {
		prefix = p.Masked().String()
	}
	for _, p := range pools {
		if p.Space == space && p.Prefix == prefix && p.Pending != nil {
			p.Pending = nil
			if err := t.PutIPAMPool(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// IPAMAddresses returns the addresses allocated in a pool.
func (t *Tx) IPAMAddresses(id string) []string {
	return indexMembers(t.b(bucketIPAMAddrs), id)
}

// IPAMAddressUsed reports whether an address of a pool is allocated.
func (t *Tx) IPAMAddressUsed(id, addr string) bool {
	set := t.b(bucketIPAMAddrs).Bucket([]byte(id))
	return set != nil && set.Get([]byte(addr)) != nil
}

// PutIPAMAddress records an allocated address.
func (t *Tx) PutIPAMAddress(id, addr string) error {
	set, err := t.b(bucketIPAMAddrs).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return err
	}
	return set.Put([]byte(addr), []byte{1})
}

// PutIPAMLease records an allocated address of a DHCP pool with its lease.
func (t *Tx) PutIPAMLease(id, addr string, l IPAMLease) error {
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	set, err := t.b(bucketIPAMAddrs).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return err
	}
	return set.Put([]byte(addr), v)
}

// IPAMLease returns the lease of an allocated address; ok is false for an
// address not allocated or allocated without one.
func (t *Tx) IPAMLease(id, addr string) (l IPAMLease, ok bool, err error) {
	set := t.b(bucketIPAMAddrs).Bucket([]byte(id))
	if set == nil {
		return l, false, nil
	}
	v := set.Get([]byte(addr))
	if len(v) < 2 {
		return l, false, nil
	}
	if err := json.Unmarshal(v, &l); err != nil {
		return l, false, fmt.Errorf("%w: IPAM lease of %s in pool %s: %w", ErrCorrupt, addr, id, err)
	}
	return l, true, nil
}

// DeleteIPAMAddress frees an address; a missing one is not an error.
func (t *Tx) DeleteIPAMAddress(id, addr string) error {
	return indexRemove(t.b(bucketIPAMAddrs), id, addr)
}

// migrateIPAM is the schema 2 -> 3 step: the IPAM buckets.
func migrateIPAM(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketIPAMPools, bucketIPAMAddrs} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}
