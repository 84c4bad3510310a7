// Package ipam is underlay's IpamDriver: Docker's remote IPAM protocol on
// the daemon's socket. It picks free subnets (free of the host's addresses,
// routes and nameservers, of every pool it holds and of every unexpired
// reservation), records each pick in the same store transaction that saw
// the state (so concurrent requests, and processes, never collide), and
// hands out addresses durably. The allocator (alloc.go) is pure; this file
// gathers the snapshot and records the result.
package ipam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Address spaces underlay answers in GetDefaultAddressSpaces.
const (
	LocalSpace  = "underlay-local"
	GlobalSpace = "underlay-global"
)

// Option keys (--ipam-opt) and Docker's keys.
const (
	OptSize         = "size"
	OptSize6        = "size6"
	OptParent       = "parent"
	keyRequestType  = "RequestAddressType"
	typeGateway     = "com.docker.network.gateway"
	dataGateway     = "com.docker.network.gateway"
	dockerKeyPrefix = "com.docker."
)

// Store is the state as the IPAM driver uses it; *store.DB implements it.
type Store interface {
	View(func(*store.Tx) error) error
	Batch(func(*store.Tx) error) error
}

// Host is what the IPAM driver reads of the host; *netlinkutil.Kernel
// implements it. It never calls Docker: dockerd calls IPAM while starting.
type Host interface {
	List(ctx context.Context) ([]netlinkutil.Link, error)
	Addrs(ctx context.Context) ([]netlinkutil.Addr, error)
	Routes(ctx context.Context) ([]netlinkutil.Route, error)
}

// Known tells of subnets in use that neither the host's kernel nor this
// state file shows: the subnets of Docker's networks (every driver's), as
// last listed in the background. cmd/underlay implements it over the
// Docker Engine API.
type Known interface {
	// KnownSubnets returns the subnets last listed and when that listing
	// was asked for (zero: never). It returns at once: it never calls
	// Docker (dockerd calls IPAM while starting, and waits for the
	// answer).
	KnownSubnets() ([]netip.Prefix, time.Time)
	// Wanted tells that the IPAM is in use, so the list should be kept
	// fresh from now on. It returns at once.
	Wanted()
}

// Config is what an IPAM is made of.
type Config struct {
	Store Store
	Host  Host
	// Bases are the ranges auto pools are cut from; nil means
	// DefaultBases.
	Bases []Base
	// Reservation is how long an auto pool stays reserved before Docker
	// confirms it; zero means 60 seconds.
	Reservation time.Duration
	// Nameservers returns the host's resolvers (resolv.conf); nil means
	// none.
	Nameservers func() []netip.Addr
	Now         func() time.Time
	Logger      *slog.Logger
	// Events is told of expired reservations (metrics); nil: no one.
	Events Events
	// Known are subnets in use elsewhere that automatic pools avoid too;
	// nil: none.
	Known Known
}

// IPAM implements the remote IpamDriver protocol.
type IPAM struct {
	store       Store
	host        Host
	bases       []Base
	reservation time.Duration
	nameservers func() []netip.Addr
	now         func() time.Time
	log         *slog.Logger
	events      Events
	known       Known
	// released are the prefixes of pools released lately, by when: a
	// listing of Docker's subnets asked for before (or just after) a
	// release still shows the network that used it.
	released *releases
}

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

// New returns an IPAM driver.
func New(c Config) (*IPAM, error) {
	if c.Store == nil || c.Host == nil {
		return nil, errors.New("ipam needs a store and the host")
	}
	if c.Bases == nil {
		c.Bases = DefaultBases()
	}
	if c.Reservation == 0 {
		c.Reservation = 60 * time.Second
	}
	if c.Nameservers == nil {
		c.Nameservers = func() []netip.Addr { return nil }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = noEvents{}
	}
	if c.Known == nil {
		c.Known = noKnown{}
	} else {
		// A state file that holds pools is an IPAM in use: its next
		// automatic pool must find the list fresh, even before Docker
		// (which may not restart with underlay) activates the IPAM again.
		var held bool
		if err := c.Store.View(func(tx *store.Tx) error {
			pools, err := tx.IPAMPools()
			held = len(pools) > 0
			return err
		}); err != nil {
			return nil, fmt.Errorf("read IPAM pools: %w", err)
		}
		if held {
			c.Known.Wanted()
		}
	}
	return &IPAM{store: c.Store, host: c.Host, bases: c.Bases, reservation: c.Reservation,
		nameservers: c.Nameservers, now: c.Now, log: c.Logger, events: c.Events, known: c.Known,
		released: &releases{at: map[netip.Prefix]time.Time{}}}, nil
}

type noKnown struct{}

func (noKnown) KnownSubnets() ([]netip.Prefix, time.Time) { return nil, time.Time{} }
func (noKnown) Wanted()                                   {}

// poolRequest is a validated RequestPool.
type poolRequest struct {
	Space  string
	Pool   netip.Prefix // invalid when auto
	Range  netip.Prefix // invalid when none
	Parent string
	Size   int
	V6     bool
}

// RequestPool hands out a pool: the one asked for, the LAN of a parent, or
// the lowest free prefix of the bases, recorded in one transaction.
func (m *IPAM) RequestPool(ctx context.Context, space, pool, subPool string, opts map[string]string, v6 bool) (store.IPAMPool, error) {
	m.known.Wanted()
	req, err := parsePoolRequest(space, pool, subPool, opts, v6, m.bases)
	if err != nil {
		return store.IPAMPool{}, err
	}
	parent, err := m.resolveParent(ctx, req)
	if err != nil {
		return store.IPAMPool{}, err
	}
	rec := store.IPAMPool{ID: newID(), Space: req.Space, Parent: parent.Name(), Created: m.now()}
	if req.Range.IsValid() {
		rec.Range = req.Range.String()
	}
	switch {
	case req.Pool.IsValid():
		rec.Prefix = req.Pool.String()
		if parent.Found && !req.V6 {
			// The LAN's gateway, when the subnet given is the parent's LAN
			// (the way to use parent= on engines that check automatic
			// pools against the host's routes: the LAN always overlaps its
			// connected route there).
			if lan, gw, err := m.parentLAN(ctx, req.Parent, parent.Link); err == nil && gw.IsValid() && lan.Overlaps(req.Pool) && req.Pool.Contains(gw) {
				rec.Gateway = gw.String()
			}
		}
	case req.Parent != "":
		lan, gw, err := m.parentLAN(ctx, req.Parent, parent.Link)
		if err != nil {
			return store.IPAMPool{}, err
		}
		if why := poolRule(lan); why != "" {
			return store.IPAMPool{}, invalidf("--ipam-opt parent=%s learns the LAN %s of %s, which cannot be a pool: it %s; or give --subnet", req.Parent, lan, parent.Link.Name, why)
		}
		rec.Prefix = lan.String()
		if gw.IsValid() {
			rec.Gateway = gw.String()
		}
	}
	if rec.Prefix != "" {
		pool := netip.MustParsePrefix(rec.Prefix)
		if req.Range.IsValid() && (!pool.Contains(req.Range.Addr()) || req.Range.Bits() < pool.Bits()) {
			return store.IPAMPool{}, invalidf("--ip-range %s is not inside the pool %s: pick a range inside the subnet", req.Range, rec.Prefix)
		}
		now := m.now()
		var expired int
		err := m.store.Batch(func(tx *store.Tx) error {
			// Expired reservations are free: drop them here too, or a
			// CreateNetwork naming this pool's prefix would confirm (revive)
			// an expired reservation of it as well.
			held, err := m.purgeExpired(tx, now, &expired)
			if err != nil {
				return err
			}
			if h, ok := overlapping(held, pool, rec.Space, parent.Same, now); ok {
				hint := ""
				if req.Parent != "" && !req.Pool.IsValid() {
					hint = fmt.Sprintf(". If nothing uses it, this is Docker asking again: engines up to 26 check a pool they did not ask for by subnet against the host's routes, and a LAN always overlaps its own connected route: pass --subnet %s with --ipam-opt parent=%s", rec.Prefix, req.Parent)
				}
				return fmt.Errorf("%w: pool %s overlaps pool %s that underlay already handed out (pool ID %s, parent %q): use another --subnet, or remove the network that uses it%s",
					pluginapi.ErrConflict, rec.Prefix, h.Prefix, h.ID, h.Parent, hint)
			}
			return tx.PutIPAMPool(rec)
		})
		if err != nil {
			return store.IPAMPool{}, err
		}
		m.expired(expired)
		m.log.Info("pool handed out", "pool", rec.ID, "prefix", rec.Prefix, "parent", rec.Parent, "gateway", rec.Gateway)
		return rec, nil
	}
	return m.autoPool(ctx, req, rec)
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
	rec.Pending = &store.Reservation{Token: rec.ID, Deadline: now.Add(m.reservation)}
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
		if err := tx.ForEachNetwork(func(n store.Network) error {
			for _, q := range append(append([]store.Pool(nil), n.IPv4...), n.IPv6...) {
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
func (m *IPAM) hostPrefixes(ctx context.Context) ([]netip.Prefix, []netlinkutil.Route, error) {
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
func coveringRoute(routes []netlinkutil.Route, bases []Base, v6 bool) (netlinkutil.Route, Base, bool) {
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
	return netlinkutil.Route{}, Base{}, false
}

// resolveParent resolves a request's --ipam-opt parent to its kernel link
// over one list of the host's links (by name or altname). A parent no link
// has is refused in the local space; in the global space (swarm's, where
// the manager's allocator may not have the nodes' interfaces) it is kept
// as given. The loopback interface has no LAN.
func (m *IPAM) resolveParent(ctx context.Context, req poolRequest) (parentRef, error) {
	ref := parentRef{Asked: req.Parent}
	if req.Parent == "" {
		return ref, nil
	}
	links, err := m.host.List(ctx)
	if err != nil {
		return parentRef{}, err
	}
	ref.links = links
	ref.Link, ref.Found = netlinkutil.FindLink(links, req.Parent)
	switch {
	case !ref.Found && req.Space != GlobalSpace:
		return parentRef{}, invalidf("--ipam-opt parent=%s: no such interface on this host (no link has that name or altname): name the interface whose LAN the network is on (ip link shows them), or drop --ipam-opt parent", req.Parent)
	case ref.Found && loopback(ref.Link):
		return parentRef{}, invalidf("--ipam-opt parent=%s: %s is the loopback interface, which is on no LAN (its addresses, 127.0.0.0/8, never leave the host): name the interface whose LAN the network is on, such as eth0", req.Parent, ref.Link.Name)
	}
	return ref, nil
}

// parentLAN is a parent's connected IPv4 prefix and the gateway of the
// default route through it, when that gateway is on the prefix. l is the
// parent's link, resolveParent's; a zero l (a parent of the global space
// no link has) has no LAN.
func (m *IPAM) parentLAN(ctx context.Context, parent string, l netlinkutil.Link) (netip.Prefix, netip.Addr, error) {
	if l.Index == 0 {
		return netip.Prefix{}, netip.Addr{}, invalidf("--ipam-opt parent=%s: no such interface on this host: name the interface whose LAN the network is on", parent)
	}
	addrs, err := m.host.Addrs(ctx)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, err
	}
	var lan netip.Prefix
	for _, a := range addrs {
		if a.LinkIndex == l.Index && a.Prefix.Addr().Is4() && a.Prefix.Bits() < 32 {
			lan = a.Prefix.Masked()
			break
		}
	}
	if !lan.IsValid() {
		return netip.Prefix{}, netip.Addr{}, invalidf("--ipam-opt parent=%s: %s has no IPv4 address to learn its LAN from: give the network --subnet and --gateway instead", parent, l.Name)
	}
	routes, err := m.host.Routes(ctx)
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, err
	}
	for _, r := range routes {
		if r.Default() && r.Table == netlinkutil.MainTable && r.LinkIndex == l.Index && r.Gateway.IsValid() && lan.Contains(r.Gateway) {
			return lan, r.Gateway, nil
		}
	}
	return lan, netip.Addr{}, nil
}

// ReleasePool forgets a pool and its addresses; an unknown ID is fine.
func (m *IPAM) ReleasePool(_ context.Context, id string) error {
	if id == "" {
		return invalidf("ReleasePool without PoolID")
	}
	var prefix netip.Prefix
	if err := m.store.Batch(func(tx *store.Tx) error {
		p, ok, err := tx.IPAMPool(id)
		if err != nil {
			return err
		}
		prefix = netip.Prefix{}
		if ok {
			prefix, _ = netip.ParsePrefix(p.Prefix)
		}
		return tx.DeleteIPAMPool(id)
	}); err != nil {
		return fmt.Errorf("release pool %s: %w", id, err)
	}
	if _, none := m.known.(noKnown); !none && prefix.IsValid() {
		m.released.add(prefix.Masked(), m.now())
	}
	m.log.Info("pool released", "pool", id)
	return nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func invalidf(format string, args ...any) error { return pluginapi.Invalidf(format, args...) }
