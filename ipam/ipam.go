// Package ipam is underlay's IpamDriver: Docker's remote IPAM protocol on
// the daemon's socket. It picks free subnets (free of the host's addresses,
// routes and nameservers, of every pool it holds and of every unexpired
// reservation), records each pick in the same store transaction that saw
// the state (so concurrent requests, and processes, never collide), and
// hands out addresses durably. The allocator (alloc.go) is pure; this file
// holds the driver and RequestPool, autopool.go automatic pools, parent.go
// the pools of a parent, address.go the addresses.
package ipam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
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
//
// RequestAddress reads only what does not grow with the host: a link by
// name or index, and the addresses near its pool.
type Host interface {
	List(ctx context.Context) ([]kernel.Link, error)
	Get(ctx context.Context, name string) (kernel.Link, error)
	LinkByIndex(ctx context.Context, index int) (kernel.Link, error)
	Addrs(ctx context.Context) ([]kernel.Addr, error)
	// AddrsNear returns the addresses whose subnet overlaps pool.
	AddrsNear(ctx context.Context, pool netip.Prefix) ([]kernel.Addr, error)
	Routes(ctx context.Context) ([]kernel.Route, error)
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
	// Prober probes the address a RequestAddress chose on a LAN pool's
	// link (lan.go); nil: no probes.
	Prober Prober
	// ProbeMemo is told of the addresses probed clean, for the driver's
	// CreateEndpoint to skip; nil: no one.
	ProbeMemo ProbeMemo
	// DHCP and DHCP6 lease the addresses of DHCP pools (dhcp.go); nil:
	// DHCP pools of that family are refused.
	DHCP  DHCPClient
	DHCP6 DHCP6Client
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
	released    *releases
	prober      Prober
	memo        ProbeMemo
	probeEvents ProbeEvents
	// skips are the addresses found in use on a LAN; inflight those being
	// probed (lan.go).
	skips    *lanSkips
	inflight *inflight
	dhcp     DHCPClient
	dhcp6    DHCP6Client
	// noName: the pools whose missing endpoint names were said (dhcp.go).
	noName *onceSet
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
	pe, ok := c.Events.(ProbeEvents)
	if !ok {
		pe = noEvents{}
	}
	if c.ProbeMemo == nil {
		c.ProbeMemo = noMemo{}
	}
	return &IPAM{store: c.Store, host: c.Host, bases: c.Bases, reservation: c.Reservation,
		nameservers: c.Nameservers, now: c.Now, log: c.Logger, events: c.Events, known: c.Known,
		released: &releases{at: map[netip.Prefix]time.Time{}},
		prober:   c.Prober, memo: c.ProbeMemo, probeEvents: pe,
		skips: &lanSkips{at: map[skipKey]lanSkip{}}, inflight: &inflight{at: map[inflightKey]bool{}},
		dhcp: c.DHCP, dhcp6: c.DHCP6, noName: &onceSet{}}, nil
}

type noMemo struct{}

func (noMemo) Probed(string, netip.Addr, time.Duration) {}

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
	// Probe is address_probe in canonical form, "" when not given.
	Probe string
	// DHCP and NoHostname are dhcp=true (dhcpv6=true for IPv6) and
	// dhcp_hostname=false; FQDN dhcp_fqdn=true.
	DHCP, NoHostname, FQDN bool
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
	if err := m.checkDHCPPool(req, parent); err != nil {
		return store.IPAMPool{}, err
	}
	rec := store.IPAMPool{ID: newID(), Space: req.Space, Parent: parent.Name(), Created: m.now(), Probe: req.Probe, DHCP: req.DHCP, NoHostname: req.NoHostname, FQDN: req.FQDN}
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
		m.log.Info("pool handed out", "pool", rec.ID, "prefix", rec.Prefix, "parent", rec.Parent, "gateway", rec.Gateway, "dhcp", rec.DHCP)
		return rec, nil
	}
	return m.autoPool(ctx, req, rec)
}

// ReleasePool forgets a pool and its addresses; an unknown ID is fine.
func (m *IPAM) ReleasePool(ctx context.Context, id string) error {
	if id == "" {
		return invalidf("ReleasePool without PoolID")
	}
	var prefix netip.Prefix
	var pool store.IPAMPool
	var leases []store.IPAMLease
	if err := m.store.Batch(func(tx *store.Tx) error {
		p, ok, err := tx.IPAMPool(id)
		if err != nil {
			return err
		}
		prefix, pool, leases = netip.Prefix{}, p, nil
		if ok {
			prefix, _ = netip.ParsePrefix(p.Prefix)
			for _, a := range tx.IPAMAddresses(id) {
				if l, leased, err := tx.IPAMLease(id, a); err == nil && leased {
					leases = append(leases, l)
				}
				if addr, err := netip.ParseAddr(a); err == nil {
					if err := m.nameReleased(tx, id, addr); err != nil {
						return err
					}
				}
			}
		}
		return tx.DeleteIPAMPool(id)
	}); err != nil {
		return fmt.Errorf("release pool %s: %w", id, err)
	}
	for _, l := range leases { // those no endpoint took over (releaseLease)
		m.releaseLease(ctx, pool, l)
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
