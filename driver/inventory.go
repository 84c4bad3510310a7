package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// The operator's view (underlay ls, underlay doctor) and the repairs
// doctor --repair asks for. Each repair checks its finding again under the
// locks a request would take and acts by the same rules: nothing is
// removed that Docker knows or that underlay does not own.

// Inventory is the driver's state as the operator sees it.
type Inventory struct {
	Now  time.Time
	Boot string
	// Mark is the alias on the links this state file made.
	Mark string
	// Grace is how old a network must be before Docker's 404 is believed.
	Grace     time.Duration
	Networks  []store.Network
	Endpoints []store.Endpoint
	Owned     []store.ParentLink
	// Use counts the networks on each parent link.
	Use map[string]int
	// Links are the kernel's links in the daemon's namespace.
	Links []netlinkutil.Link
	// HostLinks are the host links of networks with a host address, by
	// network ID.
	HostLinks map[string]string
}

// Inventory reads the state file and the kernel's links.
func (d *Driver) Inventory(ctx context.Context) (Inventory, error) {
	inv := Inventory{Now: d.now(), Boot: d.boot, Mark: d.mark, Grace: d.grace, HostLinks: map[string]string{}}
	err := d.store.View(func(tx *store.Tx) error {
		if err := tx.ForEachNetwork(func(n store.Network) error {
			inv.Networks = append(inv.Networks, n)
			if n.HostAddress != "" {
				inv.HostLinks[n.ID] = shimName(n.ID)
			}
			eps, err := tx.Endpoints(n.ID)
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
		return Inventory{}, fmt.Errorf("read the state file: %w", err)
	}
	if inv.Links, err = d.links.List(ctx); err != nil {
		return Inventory{}, err
	}
	return inv, nil
}

// RemoveStaleNetwork removes a network Docker does not know, as
// CreateNetwork removes a stale holder: only when the record is past the
// grace period and Docker itself answers that it has no such network.
func (d *Driver) RemoveStaleNetwork(ctx context.Context, id string) (string, error) {
	unlock, n, err := d.lockNetwork(ctx, id)
	if err != nil {
		return "", err
	}
	defer unlock()
	switch {
	case n == nil:
		return "already gone", nil
	case n.Pending != nil:
		return "", fmt.Errorf("network %s is being created: not stale", short(id))
	case !n.Created.IsZero() && d.now().Sub(n.Created) < d.grace:
		return "", fmt.Errorf("network %s was created %s ago, within the %s Docker may take to store it: not removed, run doctor again", short(id), d.now().Sub(n.Created).Round(time.Millisecond), d.grace)
	case d.docker == nil:
		return "", fmt.Errorf("network %s not removed: this daemon has no Docker API to confirm it is stale (--docker-host)", short(id))
	}
	exists, err := d.docker.NetworkExists(ctx, id)
	if err != nil {
		return "", fmt.Errorf("network %s not removed: %w", short(id), err)
	}
	if exists {
		return "", fmt.Errorf("network %s not removed: Docker knows it", short(id))
	}
	unlockParent, err := d.locks.acquire(ctx, exclusive(parentLock(n.Parent)))
	if err != nil {
		return "", err
	}
	defer unlockParent()
	if err := d.removeNetwork(ctx, *n); err != nil {
		return "", fmt.Errorf("remove stale network %s: %w", short(id), err)
	}
	d.log.Warn("doctor: removed stale network Docker does not know", "network", id, "parent", n.Parent)
	return fmt.Sprintf("removed network %s and its links from %s", short(id), n.Parent), nil
}

// lockNetwork takes a network's lock exclusively and reads its record (nil
// when there is none).
func (d *Driver) lockNetwork(ctx context.Context, id string) (func(), *store.Network, error) {
	unlock, err := d.locks.acquire(ctx, exclusive(networkLock(id)))
	if err != nil {
		return nil, nil, err
	}
	n, err := d.network(id)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return unlock, n, nil
}

// RecreateParent re-creates a missing parent link underlay owns and a
// network needs.
func (d *Driver) RecreateParent(ctx context.Context, name string) (string, error) {
	s, err := d.readSnapshot(false)
	if err != nil {
		return "", err
	}
	owned, ok := s.Owned[name]
	switch {
	case !ok:
		return "", fmt.Errorf("parent link %s is not one underlay created: not touched", name)
	case s.Use[name] == 0:
		return "", fmt.Errorf("no network needs parent link %s: not re-created", name)
	}
	if _, err := d.links.Get(ctx, name); err == nil {
		return "already there", nil
	}
	out, err := d.execute(ctx, []step{{Op: opRecreate, Name: name, Parent: owned, Why: "doctor --repair"}}, "")
	if err == nil && (out.busy || out.failed) {
		err = fmt.Errorf("parent link %s could not be re-created now (busy, or its base is missing): see the daemon's log", name)
	}
	if err != nil {
		return "", err
	}
	return "re-created " + name, nil
}

// DeleteOrphanLink deletes a link carrying this state file's mark that no
// record owns.
func (d *Driver) DeleteOrphanLink(ctx context.Context, name string) (string, error) {
	l, err := d.links.Get(ctx, name)
	if err != nil {
		return "already gone", nil
	}
	if l.Alias != d.mark {
		return "", fmt.Errorf("link %s does not carry this underlay's mark: not touched", name)
	}
	owned := false
	if err := d.store.View(func(tx *store.Tx) error {
		_, ep, err := tx.EndpointByLink(name)
		_, parent, perr := tx.ParentLink(name)
		owned = ep || parent
		if err == nil {
			err = perr
		}
		return err
	}); err != nil {
		return "", err
	}
	if !owned {
		owned = d.isHostLinkOfNetwork(name)
	}
	if owned {
		return "", fmt.Errorf("link %s belongs to a record now: not deleted", name)
	}
	if err := d.deleteOwnedLink(ctx, name, false); err != nil {
		return "", err
	}
	d.log.Warn("doctor: deleted link carrying underlay's mark that no record owns", "link", name)
	return "deleted " + name, nil
}

func (d *Driver) isHostLinkOfNetwork(name string) bool {
	found := false
	_ = d.store.View(func(tx *store.Tx) error {
		return tx.ForEachNetworkWithHostAddress(func(n store.Network) error {
			found = found || shimName(n.ID) == name
			return nil
		})
	})
	return found
}

// RollbackExpired rolls back a network whose reservation expired, as the
// janitor does.
func (d *Driver) RollbackExpired(ctx context.Context, id string) (string, error) {
	unlock, n, err := d.lockNetwork(ctx, id)
	if err != nil {
		return "", err
	}
	defer unlock()
	switch {
	case n == nil || n.Pending == nil:
		return "already done", nil
	case d.now().Before(n.Pending.Deadline):
		return "", fmt.Errorf("the reservation of network %s has not expired (deadline %s)", short(id), n.Pending.Deadline.Format(time.RFC3339))
	}
	if _, err := d.dropPending(id, n.Pending.Token); err != nil {
		return "", err
	}
	d.log.Warn("doctor: rolled back network whose reservation expired", "network", id, "parent", n.Parent)
	return fmt.Sprintf("rolled back network %s (its parent %s is released by the janitor when nothing needs it)", short(id), n.Parent), nil
}

// ForgetOldJoin records as left an endpoint joined in an earlier boot,
// deleting its host link if one is left.
func (d *Driver) ForgetOldJoin(ctx context.Context, netID, epID string) (string, error) {
	unlock, n, ep, err := d.lockEndpoint(ctx, netID, epID)
	if err != nil {
		return "", err
	}
	defer unlock()
	if n == nil || ep == nil || ep.Sandbox == "" {
		return "already done", nil
	}
	if ep.Boot == d.boot {
		return "", fmt.Errorf("endpoint %s is joined in this boot: not touched", short(epID))
	}
	if err := d.deleteOwnedLink(ctx, ep.Link, true); err != nil {
		return "", err
	}
	left := *ep
	left.Sandbox, left.Boot = "", ""
	if err := d.store.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(left) }); err != nil {
		return "", err
	}
	return fmt.Sprintf("endpoint %s recorded as left", short(epID)), nil
}

// StaleGrace is how old a record must be before Docker's 404 is believed.
func (d *Driver) StaleGrace() time.Duration { return d.grace }
