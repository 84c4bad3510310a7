package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
)

// RequestAddress hands out an address of a pool: the gateway (the first
// usable address, or a parent pool's LAN gateway), the address asked for if
// it is free, or the lowest free one. Picking and recording it is one
// transaction, and the first address confirms an auto pool's reservation.
// The host's own addresses are never handed out.
func (m *IPAM) RequestAddress(ctx context.Context, poolID, address string, opts map[string]string) (netip.Prefix, error) {
	if poolID == "" {
		return netip.Prefix{}, invalidf("RequestAddress without PoolID")
	}
	gateway := opts[keyRequestType] == typeGateway
	var want netip.Addr
	if address != "" {
		a, err := parseAddr(address)
		if err != nil {
			return netip.Prefix{}, invalidf("address %q of pool %s is not an IP address: %v", address, poolID, err)
		}
		want = a
	}
	own, err := m.hostAddrs(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	var got netip.Prefix
	err = m.store.Batch(func(tx *store.Tx) error {
		rec, ok, err := tx.IPAMPool(poolID)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: pool %s is unknown to underlay's IPAM (released, or its reservation expired before Docker used it): create the network again", pluginapi.ErrNotFound, poolID)
		}
		pool, err := netip.ParsePrefix(rec.Prefix)
		if err != nil {
			return fmt.Errorf("%w: pool %s has prefix %q", store.ErrCorrupt, poolID, rec.Prefix)
		}
		if rec.Expired(m.now()) {
			held, err := tx.IPAMPools()
			if err != nil {
				return err
			}
			others := held[:0:0]
			for _, h := range held {
				if h.ID != rec.ID {
					others = append(others, h)
				}
			}
			if h, clash := overlapping(others, pool, rec.Space, func(p string) bool { return p == rec.Parent }, m.now()); clash {
				return fmt.Errorf("%w: the reservation of pool %s (%s) expired and pool %s took its place: create the network again", pluginapi.ErrConflict, poolID, rec.Prefix, h.ID)
			}
		}
		used := func(a netip.Addr) bool {
			return tx.IPAMAddressUsed(poolID, a.String()) || own[a] || a.String() == rec.Gateway
		}
		var a netip.Addr
		switch {
		case want.IsValid():
			if !pool.Contains(want) {
				return invalidf("address %s is not in pool %s: pick an address inside the subnet", want, pool)
			}
			if !usable(pool, want) {
				return invalidf("address %s is reserved in pool %s (its network, broadcast or subnet-router anycast address): pick another address inside the subnet", want, pool)
			}
			if used(want) && !(gateway && want.String() == rec.Gateway && !tx.IPAMAddressUsed(poolID, want.String())) {
				return fmt.Errorf("%w: address %s of pool %s is already in use (handed out, the host's own, or the LAN's gateway): pick another or let underlay choose", pluginapi.ErrConflict, want, pool)
			}
			a = want
		case gateway && rec.Gateway != "":
			if a, err = netip.ParseAddr(rec.Gateway); err != nil {
				return fmt.Errorf("%w: pool %s has gateway %q", store.ErrCorrupt, poolID, rec.Gateway)
			}
		case gateway:
			a = firstUsable(pool)
			if used(a) {
				return fmt.Errorf("%w: the gateway address %s of pool %s is already in use (the host's own?): pass --gateway", pluginapi.ErrConflict, a, pool)
			}
		default:
			var rng netip.Prefix
			if rec.Range != "" {
				rng, _ = netip.ParsePrefix(rec.Range)
			}
			if a, err = pickAddress(pool, rng, used); err != nil {
				return fmt.Errorf("%w: pool %s has no free address left: widen --ip-range or the subnet", pluginapi.ErrConflict, poolID)
			}
		}
		if err := tx.PutIPAMAddress(poolID, a.String()); err != nil {
			return err
		}
		if rec.Pending != nil {
			rec.Pending = nil // Docker uses it: confirmed
			if err := tx.PutIPAMPool(rec); err != nil {
				return err
			}
		}
		got = netip.PrefixFrom(a, pool.Bits())
		return nil
	})
	if err != nil {
		return netip.Prefix{}, err
	}
	m.log.Debug("address handed out", "pool", poolID, "address", got, "gateway", gateway)
	return got, nil
}

// ReleaseAddress frees an address; an unknown pool or address is fine.
func (m *IPAM) ReleaseAddress(_ context.Context, poolID, address string) error {
	if poolID == "" || address == "" {
		return invalidf("ReleaseAddress without PoolID or Address")
	}
	a, err := parseAddr(address)
	if err != nil {
		return invalidf("address %q of pool %s is not an IP address: %v", address, poolID, err)
	}
	if err := m.store.Batch(func(tx *store.Tx) error { return tx.DeleteIPAMAddress(poolID, a.String()) }); err != nil {
		return fmt.Errorf("release address %s of pool %s: %w", a, poolID, err)
	}
	m.log.Debug("address released", "pool", poolID, "address", a)
	return nil
}

// hostAddrs is the set of the host's own addresses.
func (m *IPAM) hostAddrs(ctx context.Context) (map[netip.Addr]bool, error) {
	addrs, err := m.host.Addrs(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		out[a.Prefix.Addr()] = true
	}
	return out, nil
}

// parseAddr accepts an address with or without a prefix length.
func parseAddr(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Addr(), err
	}
	return netip.ParseAddr(s)
}

// Events is told of what the IPAM driver does on a request's way, for
// counting (the metrics package implements it). Its methods must be safe
// for concurrent use and return at once.
type Events interface {
	// ReservationRolledBack: an automatic pool's reservation expired
	// unconfirmed and was deleted (kind "ipam"), one call per pool.
	ReservationRolledBack(kind string)
}

type noEvents struct{}

func (noEvents) ReservationRolledBack(string) {}

// expired reports n reservations deleted by a committed purge.
func (m *IPAM) expired(n int) {
	for range n {
		m.events.ReservationRolledBack("ipam")
	}
}
