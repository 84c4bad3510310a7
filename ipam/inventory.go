package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The operator's view of the IPAM state (underlay ls) and the release of
// leaked pools (underlay doctor --repair).

// PoolState is a pool with the addresses allocated in it.
type PoolState struct {
	store.IPAMPool
	Addresses []string
}

// Pools lists every pool with its addresses.
func (m *IPAM) Pools(context.Context) ([]PoolState, error) {
	var out []PoolState
	err := m.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, p := range pools {
			out = append(out, PoolState{IPAMPool: p, Addresses: tx.IPAMAddresses(p.ID)})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read IPAM pools: %w", err)
	}
	return out, nil
}

// ReleaseLeaked releases a pool no network uses, checked again in the
// transaction that deletes it: an unconfirmed reservation past its
// deadline, or a confirmed pool older than grace (the longest a create
// takes from its pool to its commit) that no network record of underlay
// names and that overlaps none of Docker's subnets (every driver's, as
// the caller just listed them).
func (m *IPAM) ReleaseLeaked(_ context.Context, id string, grace time.Duration, dockerSubnets []netip.Prefix) (string, error) {
	var msg string
	err := m.store.Batch(func(tx *store.Tx) error {
		p, ok, err := tx.IPAMPool(id)
		if err != nil {
			return err
		}
		if !ok {
			msg = "already gone"
			return nil
		}
		now := m.now()
		switch {
		case p.Expired(now):
		case p.Pending != nil:
			return conflictf("pool %s (%s) is reserved until %s for a network being created: not released", id, p.Prefix, p.Pending.Deadline.Format(time.RFC3339))
		case !p.Created.IsZero() && now.Sub(p.Created) < grace:
			return conflictf("pool %s (%s) was handed out %s ago: not released, run doctor again", id, p.Prefix, now.Sub(p.Created).Round(time.Millisecond))
		default:
			used := false
			if err := tx.ForEachNetwork(func(n record.Network) error {
				for _, q := range append(append([]record.Pool{}, n.IPv4...), n.IPv6...) {
					used = used || q.Subnet == p.Prefix
				}
				return nil
			}); err != nil {
				return err
			}
			if used {
				return conflictf("pool %s (%s) is used by a network of underlay: not released", id, p.Prefix)
			}
			prefix, err := netip.ParsePrefix(p.Prefix)
			if err != nil {
				return conflictf("pool %s has prefix %q, which does not parse: not released", id, p.Prefix)
			}
			for _, s := range dockerSubnets {
				if s.Overlaps(prefix) {
					return conflictf("pool %s (%s) overlaps Docker's network subnet %s: not released", id, p.Prefix, s)
				}
			}
		}
		msg = fmt.Sprintf("released pool %s (%s) and its %d addresses", id, p.Prefix, len(tx.IPAMAddresses(id)))
		return tx.DeleteIPAMPool(id)
	})
	if err != nil {
		return "", err
	}
	m.log.Warn("doctor: released IPAM pool no network uses", "pool", id, "result", msg)
	return msg, nil
}

// conflictf is a release refused because the pool is, or may be, in use.
func conflictf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", pluginapi.ErrConflict, fmt.Sprintf(format, args...))
}
