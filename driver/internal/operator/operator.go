// Package operator is the daemon's state as the operator sees it
// (Inventory: underlay ls, underlay doctor) and the repairs doctor
// --repair asks for (repairs.go). Each repair checks its finding again
// under the locks a request would take and acts by the same rules:
// nothing is removed that Docker knows or that underlay does not own.
//
// Rule: the kernel only through its own Kernel interface, the store only
// through its own Store, Docker only through its NetworkChecker; plans are
// carried out by driver/internal/reconcile's executor, owned links deleted
// by driver/internal/links, networks removed by the driver (Remove).
package operator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/driver/internal/joins"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/driver/internal/stale"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Kernel is the part of the kernel the operator's view needs
// (netlinkutil.Links).
type Kernel interface {
	Get(ctx context.Context, name string) (netlinkutil.Link, error)
	List(ctx context.Context) ([]netlinkutil.Link, error)
}

// Store is the state as the operator's view reads it (*store.DB).
type Store interface {
	View(func(*store.Tx) error) error
}

// Locker takes the locks a request would (keylock.Locker).
type Locker interface {
	Acquire(ctx context.Context, reqs ...keylock.Req) (context.Context, func(), error)
}

// NetworkChecker asks Docker whether a network still exists
// (driver.NetworkChecker): stale's.
type NetworkChecker = stale.NetworkChecker

// Events is told of what the repairs did, for counting (driver.Events).
type Events interface {
	StaleRemoved()
	ReservationRolledBack(kind string)
	RepairAction(op string)
}

// Operator answers the operator's view and repairs for this instance
// (Mark) in this boot (Boot).
type Operator struct {
	Kernel Kernel
	Store  Store
	Locks  Locker
	// Docker is asked before a stale network is removed; nil refuses.
	Docker    NetworkChecker
	Reconcile *reconcile.Executor // carrying out the repair steps
	Owned     *links.Owned        // deleting an orphan link
	Joins     *joins.Table        // the endpoints with their joins
	// Network reads one network record, nil when there is none; Remove
	// removes a network with its links and records, its lock and its
	// parent's held (the driver's).
	Network func(id string) (*store.Network, error)
	Remove  func(ctx context.Context, n store.Network) error
	Events  Events
	Mark    string
	Boot    string
	// Grace is how old a record must be before Docker's 404 is believed;
	// Window is the longest a create may take from its pool to its commit.
	Grace  time.Duration
	Window time.Duration
	Log    *slog.Logger
	Now    func() time.Time
}

// Inventory reads the state file and the kernel's links.
func (o *Operator) Inventory(ctx context.Context) (doctor.Inventory, error) {
	inv := doctor.Inventory{Now: o.Now(), Boot: o.Boot, Mark: o.Mark, Grace: o.Grace, PoolGrace: o.Window, HostLinks: map[string]string{}}
	err := o.Store.View(func(tx *store.Tx) error {
		if err := tx.ForEachNetwork(func(n store.Network) error {
			inv.Networks = append(inv.Networks, n)
			if n.HostAddress != "" {
				inv.HostLinks[n.ID] = rules.ShimName(n.ID)
			}
			eps, err := o.Joins.Endpoints(tx, n.ID)
			inv.Endpoints = append(inv.Endpoints, eps...)
			return err
		}); err != nil {
			return err
		}
		inv.Use = tx.ParentUse()
		var err error
		inv.Owned, err = tx.ParentLinks()
		return err
	})
	if err != nil {
		return doctor.Inventory{}, fmt.Errorf("read the state file: %w", err)
	}
	if inv.Links, err = o.Kernel.List(ctx); err != nil {
		return doctor.Inventory{}, err
	}
	inv.HostLinkAddrs = o.Reconcile.HostLinkAddrs(ctx, inv.Links, maps.Values(inv.HostLinks))
	return inv, nil
}

// refusef is a repair refused because its finding no longer holds or is
// not safe to act on: a conflict with the state, not a failure (409).
func refusef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", pluginapi.ErrConflict, fmt.Sprintf(format, args...))
}
