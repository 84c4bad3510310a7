package driver

import (
	"context"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/lancheck"
)

// The operator's view (underlay ls, underlay doctor) and the repairs
// doctor --repair asks for: driver/internal/reconcile's. Each repair checks
// its finding again under the locks a request would take and acts by the
// same rules: nothing is removed that Docker knows or that underlay does
// not own.

// Inventory reads the state file and the kernel's links, with the latest
// LAN preflight of each network that has a finished one.
func (d *Driver) Inventory(ctx context.Context) (doctor.Inventory, error) {
	inv, err := d.operator.Inventory(ctx)
	if err != nil {
		return inv, err
	}
	results := d.LANChecks()
	for _, n := range inv.Networks {
		if items, ok := results[n.ID]; ok {
			if inv.LAN == nil {
				inv.LAN = map[string][]lancheck.Item{}
			}
			inv.LAN[n.ID] = items
		}
	}
	return inv, nil
}

// HealLink puts an owned link that exists but is broken back in order (set
// up, its address, its MTU; a renamed owned VLAN followed), as a repair
// pass does, for that link only: the plan is made again from the state
// now and carried out under the same locks.
func (d *Driver) HealLink(ctx context.Context, name string) (string, error) {
	return d.operator.HealLink(ctx, name)
}

// RemoveStaleNetwork removes a network Docker does not know, as
// CreateNetwork removes a stale holder: only when the record is past the
// grace period and Docker itself answers that it has no such network.
func (d *Driver) RemoveStaleNetwork(ctx context.Context, id string) (string, error) {
	return d.operator.RemoveStaleNetwork(ctx, id)
}

// RecreateParent re-creates a missing parent link underlay owns and a
// network needs.
func (d *Driver) RecreateParent(ctx context.Context, name string) (string, error) {
	return d.operator.RecreateParent(ctx, name)
}

// DeleteOrphanLink deletes a link carrying this state file's mark that no
// record owns. It holds the locks of the link and of its lower link, which
// every request making a host link or a parent link holds until its
// record is committed (endpoint links are recorded before they are made).
func (d *Driver) DeleteOrphanLink(ctx context.Context, name string) (string, error) {
	return d.operator.DeleteOrphanLink(ctx, name)
}

// RollbackExpired rolls back a network whose reservation expired, as the
// janitor does: without waiting for the network's lock, which the create
// that hung still holds; the janitor then releases its parent link.
func (d *Driver) RollbackExpired(ctx context.Context, id string) (string, error) {
	return d.operator.RollbackExpired(ctx, id)
}

// StaleGrace is how old a record must be before Docker's 404 is believed.
func (d *Driver) StaleGrace() time.Duration { return d.grace }

// CreateWindow is the longest a CreateNetwork may take from its IPAM pool
// to its commit: the stale check's lookup and grace, and the pending
// reservation's deadline. A pool younger than that may belong to a create
// still under way.
func (d *Driver) CreateWindow() time.Duration { return d.lookup + d.grace + d.pending }
