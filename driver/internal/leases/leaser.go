// Package leases carries out the DHCP lease effects of endpoints for the
// driver (the Leaser): lease requests, the renewal loop and its timers,
// the journal of leases to give back, and the blocks of lost leases.
//
// Rule: it reaches the store, the kernel and the lease client only through
// its own small interfaces (Store, LinkGetter, AddrBlocker, Client) and the
// driver's locks only through LockEndpoint and LockParents; its plans are
// the rules package's.
package leases

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Leaser carries out the DHCP lease effects of endpoints: the requests to
// the lease client, the renewal loop (renew.go, timers.go), the journal of
// leases to give back (journal.go) and the blocks of lost leases
// (lost.go). It holds exactly what those need; the Driver holds one and
// calls it from CreateEndpoint, DeleteEndpoint and DeleteNetwork. Which
// offer is free (claims, the store's index, the address probe) is the
// Driver's: acquireLease (driver/dhcp.go).
type Leaser struct {
	// DHCP is the lease client; nil: this daemon has no DHCP client.
	DHCP    Client
	store   Store
	links   LinkGetter
	blocker AddrBlocker // nil when the link layer cannot block
	mark    string
	log     *slog.Logger
	now     func() time.Time
	timers  *Timers
	stop    <-chan struct{} // closed by Driver.Close
	// lockEndpoint takes an endpoint's lock and reads its records
	// (Driver.lockEndpoint): a renewal commits under the same lock as
	// the requests.
	lockEndpoint LockEndpoint
	// lockParents takes parent links' locks shared: a block is made
	// under its parent's lock (BlockOnParent).
	lockParents LockParents
}

// Store is the state as the leaser uses it (*store.DB).
type Store interface {
	View(func(*store.Tx) error) error
	Batch(func(*store.Tx) error) error
}

// LinkGetter reads a link (netlinkutil.Links): an ipvlan lease asks with
// its parent's MAC.
type LinkGetter interface {
	Get(ctx context.Context, name string) (netlinkutil.Link, error)
}

// LockEndpoint takes an endpoint's lock and reads its records; the
// returned func unlocks.
type LockEndpoint func(ctx context.Context, netID, epID string) (context.Context, func(), *store.Network, *store.Endpoint, error)

// LockParents takes parent links' locks, shared (the driver's), waiting
// for them; the returned func unlocks. Following an owned VLAN an
// operator renamed (driver/internal/links Follow) holds the old and new
// names' locks exclusive while it moves the networks on it, and their
// blocks, to the new name.
type LockParents func(ctx context.Context, names ...string) (func(), error)

// Config is what a Leaser is made of.
type Config struct {
	Store        Store
	Links        LinkGetter
	DHCP         Client      // nil: no DHCP client
	Blocker      AddrBlocker // nil: the link layer cannot block
	Mark         string      // the instance's link mark, also the blocks' tag
	Log          *slog.Logger
	Now          func() time.Time
	Stop         <-chan struct{} // closed when the driver closes
	LockEndpoint LockEndpoint
	LockParents  LockParents // nil: blocks are made without a lock (tests)
}

// New returns a leaser with no lease scheduled.
func New(c Config) *Leaser {
	return &Leaser{DHCP: c.DHCP, store: c.Store, links: c.Links, blocker: c.Blocker, mark: c.Mark, log: c.Log, now: c.Now,
		timers: NewTimers(), stop: c.Stop, lockEndpoint: c.LockEndpoint, lockParents: c.LockParents}
}

// Timers are the due times of the leases this leaser renews.
func (ls *Leaser) Timers() *Timers { return ls.timers }

// Schedule sets when an endpoint's lease is acted on next.
func (ls *Leaser) Schedule(network, endpoint string, at time.Time) {
	ls.timers.Set(Key{network, endpoint}, at)
}

// Wait waits for the renewal loop and its renewals to end (after Stop is
// closed).
func (ls *Leaser) Wait() { ls.timers.Wait() }

// RequestOf is the request for an endpoint's lease.
func (ls *Leaser) RequestOf(ctx context.Context, n store.Network, ep store.Endpoint) (Request, error) {
	r := Request{Parent: n.Parent}
	if n.Type == rules.TypeIpvlan {
		l, err := ls.links.Get(ctx, n.Parent)
		if err != nil {
			return r, fmt.Errorf("parent %s of DHCP network %s: %w", n.Parent, dockerid.Short(n.ID), err)
		}
		if r.MAC, err = net.ParseMAC(l.MAC); err != nil {
			return r, fmt.Errorf("parent %s has no usable MAC %q for DHCP: %w", n.Parent, l.MAC, err)
		}
		// Type 0 (not a hardware address), then a name of the endpoint's:
		// the same endpoint asks with the same ID after a restart.
		r.ClientID = append([]byte{0}, "underlay-"+ep.ID...)
	} else {
		var err error
		if r.MAC, err = net.ParseMAC(ep.MAC); err != nil {
			return r, fmt.Errorf("endpoint %s has no usable MAC %q for DHCP: %w", dockerid.Short(ep.ID), ep.MAC, err)
		}
	}
	if ep.Lease != nil {
		if p, err := netip.ParsePrefix(ep.Lease.Addr); err == nil {
			r.Address = p.Addr()
		}
	}
	return r, nil
}

// Release gives an endpoint's lease back, best effort; false when it
// could not.
func (ls *Leaser) Release(ctx context.Context, n store.Network, ep store.Endpoint) bool {
	if ls.DHCP == nil || ep.Lease == nil {
		return false
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, rules.DHCPOf(n).Timeout)
		err = ls.DHCP.Release(ctx, r, *ep.Lease)
		cancel()
	}
	if err != nil {
		ls.log.Warn("could not release DHCP lease: the next start tries again; the server frees it when it expires", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr, "error", err)
		return false
	}
	ls.log.Info("released DHCP lease", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr)
	return true
}
