package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Automatic pools: the lowest free prefix of the bases, free of the
// host's addresses, routes and nameservers, of every pool and network
// underlay holds and of Docker's subnets as last listed; reservations
// until Docker confirms them.

// releaseGrace is how long after a pool's release a listing of Docker's
// subnets may still show its network: libnetwork releases the pool before
// it removes the network from its store.
const releaseGrace = 2 * time.Second

// releases records the prefixes of released pools.
type releases struct {
	mu sync.Mutex
	at map[netip.Prefix]time.Time
}

func (r *releases) add(p netip.Prefix, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at[p] = t
}

// stale filters out of a listing asked for at asOf the prefixes released
// since (or up to releaseGrace before), and forgets releases no listing
// after asOf can show any more.
func (r *releases) stale(listed []netip.Prefix, asOf time.Time) []netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := listed[:0:0]
	for _, p := range listed {
		if t, ok := r.at[p]; ok && t.After(asOf.Add(-releaseGrace)) {
			continue
		}
		out = append(out, p)
	}
	for p, t := range r.at {
		if !t.After(asOf.Add(-releaseGrace)) {
			delete(r.at, p)
		}
	}
	return out
}

// autoPool picks the lowest free prefix and reserves it in the same
// transaction.
func (m *IPAM) autoPool(ctx context.Context, req poolRequest, rec store.IPAMPool) (store.IPAMPool, error) {
	if len(familyBases(m.bases, req.V6)) == 0 {
		return store.IPAMPool{}, invalidf("no IPv%s base is configured for automatic pools: add one with --default-address-pool base=CIDR,size=N (or DEFAULT_ADDRESS_POOLS), or pass --subnet", map[bool]string{false: "4", true: "6"}[req.V6])
	}
	inUse, routes, err := m.hostPrefixes(ctx)
	if err != nil {
		return store.IPAMPool{}, err
	}
	// Docker's subnets, every driver's, as last listed (another underlay
	// with its own state file on this host hands out from the same bases).
	// A pool underlay released since that listing is free, though the
	// listing still shows its network.
	known, asOf := m.known.KnownSubnets()
	inUse = append(inUse, m.released.stale(known, asOf)...)
	now := m.now()
	rec.Auto = true
	rec.Pending = &record.Reservation{Token: rec.ID, Deadline: now.Add(m.reservation)}
	var expired int
	err = m.store.Batch(func(tx *store.Tx) error {
		held, err := m.purgeExpired(tx, now, &expired)
		if err != nil {
			return err
		}
		taken := append([]netip.Prefix(nil), inUse...)
		for _, h := range held {
			if p, err := netip.ParsePrefix(h.Prefix); err == nil {
				taken = append(taken, p)
			}
		}
		// The subnets of underlay's own networks, whatever IPAM gave them
		// (the driver would refuse a network on one of them).
		if err := tx.ForEachNetwork(func(n record.Network) error {
			for _, q := range append(append([]record.Pool(nil), n.IPv4...), n.IPv6...) {
				if p, err := netip.ParsePrefix(q.Subnet); err == nil {
					taken = append(taken, p.Masked())
				}
			}
			return nil
		}); err != nil {
			return err
		}
		p, err := pickPool(m.bases, req.V6, req.Size, taken)
		if err != nil {
			size := "pool of the bases' sizes"
			if req.Size != 0 {
				size = fmt.Sprintf("/%d", req.Size)
			}
			if r, b, ok := coveringRoute(routes, m.bases, req.V6); ok {
				return fmt.Errorf("%w: %w: no free %s is left in the configured bases (%s): the host's route to %s (table %d) covers the whole base %s, and automatic pools never overlap a route: configure a base outside it with --default-address-pool base=CIDR,size=N (or DEFAULT_ADDRESS_POOLS), or pass --subnet",
					pluginapi.ErrConflict, err, size, describeBases(m.bases, req.V6), r.Dst, r.Table, b.Prefix)
			}
			return fmt.Errorf("%w: %w: no free %s is left in the configured bases (%s): widen them with --default-address-pool base=CIDR,size=N (or DEFAULT_ADDRESS_POOLS), or pass --subnet",
				pluginapi.ErrConflict, err, size, describeBases(m.bases, req.V6))
		}
		rec.Prefix = p.String()
		return tx.PutIPAMPool(rec)
	})
	if err != nil {
		return store.IPAMPool{}, err
	}
	m.expired(expired)
	m.log.Info("pool reserved", "pool", rec.ID, "prefix", rec.Prefix, "until", rec.Pending.Deadline)
	return rec, nil
}

// purgeExpired deletes the reservations expired at now (free again) and
// returns the pools left; *n is set to how many it deleted (a Batch
// function may run again: the count of the run that commits is reported).
func (m *IPAM) purgeExpired(tx *store.Tx, now time.Time, n *int) ([]store.IPAMPool, error) {
	held, err := tx.IPAMPools()
	if err != nil {
		return nil, err
	}
	*n = 0
	live := held[:0]
	for _, h := range held {
		if !h.Expired(now) {
			live = append(live, h)
			continue
		}
		if err := tx.DeleteIPAMPool(h.ID); err != nil {
			return nil, err
		}
		*n++
		m.log.Info("pool reservation expired unconfirmed: free again", "pool", h.ID, "prefix", h.Prefix)
	}
	return live, nil
}

// overlapping finds a live pool of the space that overlaps p on the same
// parent (pools on different parents are on different wires; sameParent
// tells whether a held pool's recorded parent is p's). The global space is
// swarm's: its allocator on the manager and each node's libnetwork ask for
// the same subnet, and libnetwork itself checks no overlap in global
// scope, so neither does underlay.
func overlapping(held []store.IPAMPool, p netip.Prefix, space string, sameParent func(string) bool, now time.Time) (store.IPAMPool, bool) {
	if space == GlobalSpace {
		return store.IPAMPool{}, false
	}
	for _, h := range held {
		hp, err := netip.ParsePrefix(h.Prefix)
		if err != nil || h.Expired(now) || h.Space != space || !sameParent(h.Parent) {
			continue
		}
		if hp.Overlaps(p) {
			return h, true
		}
	}
	return store.IPAMPool{}, false
}

// hostPrefixes is everything of the host an auto pool must not overlap:
// its addresses, its routes other than default routes (and routes that
// together are one, see blockingRoutes), its nameservers. It returns the
// routes as well, for the refusal.
func (m *IPAM) hostPrefixes(ctx context.Context) ([]netip.Prefix, []kernel.Route, error) {
	addrs, err := m.host.Addrs(ctx)
	if err != nil {
		return nil, nil, err
	}
	routes, err := m.host.Routes(ctx)
	if err != nil {
		return nil, nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a.Prefix.Addr(), a.Prefix.Addr().BitLen()))
	}
	out = append(out, blockingRoutes(routes)...)
	for _, ns := range m.nameservers() {
		out = append(out, netip.PrefixFrom(ns, ns.BitLen()))
	}
	return out, routes, nil
}

// coveringRoute finds a route that blocks automatic pools and covers a
// whole base of the family: the one thing to name when none is free.
func coveringRoute(routes []kernel.Route, bases []Base, v6 bool) (kernel.Route, Base, bool) {
	blocking := map[netip.Prefix]bool{}
	for _, p := range blockingRoutes(routes) {
		blocking[p] = true
	}
	for _, b := range familyBases(bases, v6) {
		for _, r := range routes {
			if blocking[r.Dst.Masked()] && r.Dst.Bits() <= b.Prefix.Bits() && r.Dst.Contains(b.Prefix.Addr()) {
				return r, b, true
			}
		}
	}
	return kernel.Route{}, Base{}, false
}
