package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/joins"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Locker takes the locks a request would (keylock.Locker).
type Locker interface {
	Acquire(ctx context.Context, reqs ...keylock.Req) (context.Context, func(), error)
}

// Operator answers the operator's view and repairs for this instance
// (Mark) in this boot (Boot).
type Operator struct {
	Kernel netlinkutil.Links
	Store  links.Store
	Locks  Locker
	// Docker is asked before a stale network is removed; nil refuses.
	Docker    NetworkChecker
	Reconcile *Executor    // carrying out the repair steps
	Owned     *links.Owned // deleting an orphan link
	Joins     *joins.Table // the endpoints with their joins
	Events    Events
	Mark      string
	Boot      string
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
		if err := tx.ForEachNetwork(func(n record.Network) error {
			inv.Networks = append(inv.Networks, n)
			if n.HostAddress != "" {
				inv.HostLinks[n.ID] = config.ShimName(n.ID)
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
