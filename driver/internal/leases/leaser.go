// Package leases carries out the lease effects of endpoints for the
// driver, for DHCP and DHCPv6 alike: one lifecycle (acquire with its
// decline-and-retry loop, the journal of leases to give back, renewal and
// its timers, the loss of a lease and its block, release) written once in
// a Leaser, over a small per-family adapter (Family: DHCP over dhcp's
// client and record.Lease, DHCP6 over dhcp6's client and record.Lease6).
//
// A file per phase: acquire.go, journal.go, renew.go, lost.go, timers.go,
// release.go; family.go is the adapters' contract and the families'
// words, families.go the two adapters.
//
// Rule: it reaches the store, the kernel and the lease clients only
// through its own small interfaces (Store, LinkGetter, AddrBlocker,
// Client, Client6) and the request locks (keylock) as the requests take
// them; which offer is free is the driver's (Free); its plans are
// package plan's and the dhcp and dhcp6 packages'.
package leases

import (
	"context"
	"log/slog"
	"time"

	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Leaser carries out the lease effects of one family's endpoints: the
// requests to the lease client, acquiring (acquire.go), the renewal loop
// (renew.go, timers.go), the journal of leases to give back (journal.go),
// the blocks of lost leases (lost.go) and release (release.go). L is the
// record's lease (record.Lease, record.Lease6), R the client's request.
type Leaser[L, R any] struct {
	// Family is the adapter to the family's client and record; its
	// client nil: this daemon has no client of the family.
	Family  Family[L, R]
	store   Store
	links   LinkGetter
	blocker AddrBlocker // nil when the link layer cannot block
	mark    string
	log     *slog.Logger
	now     func() time.Time
	timers  *Timers
	stop    <-chan struct{} // closed by Driver.Close
	// lockEndpoint takes an endpoint's lock and reads its records
	// (keylock.Locker.Endpoint): a renewal commits under the same lock as
	// the requests.
	lockEndpoint LockEndpoint
	// lockParents takes parent links' locks shared: a block is made
	// under its parent's lock (BlockOnParent).
	lockParents LockParents
}

// V4 is the DHCP leaser, V6 the DHCPv6 one.
type (
	V4 = Leaser[record.Lease, Request]
	V6 = Leaser[record.Lease6, dhcp6.Request]
)

// Store is the state as the leaser uses it (*store.DB).
type Store interface {
	View(func(*store.Tx) error) error
	Batch(func(*store.Tx) error) error
}

// LinkGetter reads a link (netlinkutil.Links): an ipvlan lease asks with
// its parent's MAC.
type LinkGetter interface {
	Get(ctx context.Context, name string) (kernel.Link, error)
}

// LockEndpoint takes an endpoint's lock and reads its records; the
// returned func unlocks.
type LockEndpoint func(ctx context.Context, netID, epID string) (context.Context, func(), *record.Network, *record.Endpoint, error)

// LockParents takes parent links' locks, shared (the driver's), waiting
// for them; the returned func unlocks. Following an owned VLAN an
// operator renamed (driver/internal/links Follow) holds the old and new
// names' locks exclusive while it moves the networks on it, and their
// blocks, to the new name.
type LockParents func(ctx context.Context, names ...string) (func(), error)

// Config is what the leasers are made of.
type Config struct {
	Store   Store
	Links   LinkGetter
	DHCP    Client      // nil: no DHCP client
	DHCPv6  Client6     // nil: no DHCPv6 client
	Blocker AddrBlocker // nil: the link layer cannot block
	Mark    string      // the instance's link mark, also the blocks' tag
	Log     *slog.Logger
	Now     func() time.Time
	Stop    <-chan struct{} // closed when the driver closes
	// Locks are the requests' locks: a renewal commits under its
	// endpoint's lock, a block is made under its parent's; nil: blocks
	// are made without a lock (tests).
	Locks *keylock.Locker
}

// newLeaser returns a leaser of family f with no lease scheduled.
func newLeaser[L, R any](c Config, f Family[L, R]) *Leaser[L, R] {
	ls := &Leaser[L, R]{Family: f, store: c.Store, links: c.Links, blocker: c.Blocker, mark: c.Mark, log: c.Log, now: c.Now,
		timers: NewTimers(), stop: c.Stop}
	locks := c.Locks
	if locks == nil {
		locks = keylock.New()
	} else {
		ls.lockParents = locks.Parents
	}
	ls.lockEndpoint = func(ctx context.Context, netID, epID string) (context.Context, func(), *record.Network, *record.Endpoint, error) {
		return locks.Endpoint(ctx, c.Store, netID, epID)
	}
	return ls
}

// Leases are both families' leasers: what the driver holds, and how
// CreateEndpoint, DeleteEndpoint and DeleteNetwork reach them.
type Leases struct {
	V4 *V4
	V6 *V6
}

// New returns the leasers of both families with no lease scheduled.
func New(c Config) *Leases {
	return &Leases{V4: newLeaser[record.Lease, Request](c, DHCP{Client: c.DHCP}), V6: newLeaser[record.Lease6, dhcp6.Request](c, DHCP6{Client: c.DHCPv6})}
}

// Run makes the kernel's blocks those of the lost leases of both
// families, then loads every lease from the state file and renews each
// when due, at most maxRenewals at once per family, until ctx ends or the
// driver closes. Call it after Restore.
func (ls *Leases) Run(ctx context.Context) error {
	if err := ls.V4.restoreBlocks(ctx); err != nil {
		ls.V4.log.Error("could not block the addresses of lost DHCP and DHCPv6 leases again: their containers may send from addresses they do not hold", "error", err)
	}
	if err := ls.V4.Run(ctx); err != nil {
		return err
	}
	return ls.V6.Run(ctx)
}

// Wait waits for both renewal loops and what they started (after Stop
// is closed).
func (ls *Leases) Wait() {
	ls.V4.Wait()
	ls.V6.Wait()
}

// Deletion is the journal entries written with an endpoint's deletion:
// its held leases of both families, to be released.
func (ls *Leases) Deletion(ctx context.Context, n record.Network, ep record.Endpoint) []record.PendingRelease {
	var out []record.PendingRelease
	for _, rec := range []*record.PendingRelease{ls.V4.JournalDeletion(ctx, n, ep), ls.V6.JournalDeletion(ctx, n, ep)} {
		if rec != nil {
			out = append(out, *rec)
		}
	}
	return out
}

// Forget is what deleting an endpoint does with its leases of both
// families (Leaser.Forget).
func (ls *Leases) Forget(ctx context.Context, n record.Network, ep record.Endpoint) {
	ls.V4.Forget(ctx, n, ep)
	ls.V6.Forget(ctx, n, ep)
}

// Timers are the due times of the leases this leaser renews.
func (ls *Leaser[L, R]) Timers() *Timers { return ls.timers }

// Wait waits for the renewal loop and its renewals to end (after Stop is
// closed).
func (ls *Leaser[L, R]) Wait() { ls.timers.Wait() }

// HasClient says whether the leaser has a client of its family.
func (ls *Leaser[L, R]) HasClient() bool { return ls.Family.HasClient() }

// Schedule has an endpoint's lease acted on when due.
func (ls *Leaser[L, R]) Schedule(n record.Network, ep record.Endpoint) {
	if l := ls.Family.Of(ep); l != nil {
		ls.timers.Set(Key{n.ID, ep.ID}, ls.Family.Next(*l, ls.now()))
	}
}

// RequestOf is the request for an endpoint's lease.
func (ls *Leaser[L, R]) RequestOf(ctx context.Context, n record.Network, ep record.Endpoint) (R, error) {
	return ls.Family.Request(ctx, ls.links, n, ep)
}
