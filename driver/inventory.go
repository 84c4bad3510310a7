package driver

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// The operator's view (underlay ls, underlay doctor) and the repairs
// doctor --repair asks for. Each repair checks its finding again under the
// locks a request would take and acts by the same rules: nothing is
// removed that Docker knows or that underlay does not own.

// Inventory is the driver's state as the operator sees it (the type
// lives with the doctor, which reads it, so that the operator's tools
// need nothing of the driver).
type Inventory = doctor.Inventory

// Inventory reads the state file and the kernel's links.
func (d *Driver) Inventory(ctx context.Context) (Inventory, error) {
	inv := Inventory{Now: d.now(), Boot: d.boot, Mark: d.mark, Grace: d.grace, PoolGrace: d.CreateWindow(), HostLinks: map[string]string{}}
	err := d.store.View(func(tx *store.Tx) error {
		if err := tx.ForEachNetwork(func(n store.Network) error {
			inv.Networks = append(inv.Networks, n)
			if n.HostAddress != "" {
				inv.HostLinks[n.ID] = rules.ShimName(n.ID)
			}
			eps, err := d.joins.Endpoints(tx, n.ID)
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
	inv.HostLinkAddrs = d.reconcile.HostLinkAddrs(ctx, inv.Links, maps.Values(inv.HostLinks))
	return inv, nil
}

// HealLink puts an owned link that exists but is broken back in order (set
// up, its address, its MTU; a renamed owned VLAN followed), as a repair
// pass does, for that link only: the plan is made again from the state
// now and carried out under the same locks.
func (d *Driver) HealLink(ctx context.Context, name string) (string, error) {
	links, err := d.links.List(ctx)
	if err != nil {
		return "", err
	}
	s, err := d.reconcile.Snapshot(true, links...)
	if err != nil {
		return "", err
	}
	d.reconcile.ReadShimAddrs(ctx, &s, links)
	var todo []rules.Step
	for _, st := range rules.PlanRepair(s, links, d.mark) {
		if (st.Op == rules.OpHeal || st.Op == rules.OpShim || st.Op == rules.OpFollow) && (st.Name == name || st.To == name) {
			todo = append(todo, st)
		}
	}
	if len(todo) == 0 {
		return "no longer needed: link " + name + " is healthy or not underlay's to heal", nil
	}
	out, err := d.reconcile.ExecuteCounted(ctx, todo, "", d.events.RepairAction)
	switch {
	case err != nil:
		return "", err
	case out.Busy:
		return "", refusef("link %s is in use by a request: try again", name)
	case out.Failed:
		return "", fmt.Errorf("could not heal link %s: see the daemon's log", name)
	}
	return "healed " + name + " (" + rules.StepsString(todo) + ")", nil
}

// refusef is a repair refused because its finding no longer holds or is
// not safe to act on: a conflict with the state, not a failure (409).
func refusef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
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
		return "no longer needed: the network is gone", nil
	case n.Pending != nil:
		return "", refusef("network %s is being created: not stale", dockerid.Short(id))
	case !n.Created.IsZero() && d.now().Sub(n.Created) < d.grace:
		return "", refusef("network %s was created %s ago, within the %s Docker may take to store it: not removed, run doctor again", dockerid.Short(id), d.now().Sub(n.Created).Round(time.Millisecond), d.grace)
	case d.docker == nil:
		return "", refusef("network %s not removed: this daemon has no Docker API to confirm it is stale (--docker-host)", dockerid.Short(id))
	}
	exists, err := d.docker.NetworkExists(ctx, id)
	if err != nil {
		return "", refusef("network %s not removed: the daemon's Docker could not confirm it is stale: %v", dockerid.Short(id), err)
	}
	if exists {
		return "", refusef("network %s not removed: the daemon's Docker knows it (is --docker-host the daemon's engine?)", dockerid.Short(id))
	}
	_, unlockParent, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if err != nil {
		return "", err
	}
	defer unlockParent()
	if err := d.removeNetwork(ctx, *n); err != nil {
		return "", fmt.Errorf("remove stale network %s: %w", dockerid.Short(id), err)
	}
	d.events.StaleRemoved()
	d.log.Warn("doctor: removed stale network Docker does not know", "network", id, "parent", n.Parent)
	return fmt.Sprintf("removed network %s and its links from %s", dockerid.Short(id), n.Parent), nil
}

// lockNetwork takes a network's lock exclusively and reads its record (nil
// when there is none).
func (d *Driver) lockNetwork(ctx context.Context, id string) (func(), *store.Network, error) {
	_, unlock, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.NetworkKey(id)))
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
	s, err := d.reconcile.Snapshot(false)
	if err != nil {
		return "", err
	}
	owned, ok := s.Owned[name]
	switch {
	case !ok || s.Use[name] == 0:
		return "no longer needed: no network needs an owned link " + name, nil
	}
	if _, err := d.links.Get(ctx, name); err == nil {
		return "no longer needed: it is there", nil
	}
	out, err := d.reconcile.Execute(ctx, []rules.Step{{Op: rules.OpRecreate, Name: name, Parent: owned, Why: "doctor --repair"}}, "")
	if err == nil && (out.Busy || out.Failed) {
		err = fmt.Errorf("parent link %s could not be re-created now (a request holds it, or its base is missing): see the daemon's log", name)
	}
	if err != nil {
		return "", err
	}
	return "re-created " + name, nil
}

// DeleteOrphanLink deletes a link carrying this state file's mark that no
// record owns. It holds the locks of the link and of its lower link, which
// every request making a host link or a parent link holds until its
// record is committed (endpoint links are recorded before they are made).
func (d *Driver) DeleteOrphanLink(ctx context.Context, name string) (string, error) {
	links, err := d.links.List(ctx)
	if err != nil {
		return "", err
	}
	var l netlinkutil.Link
	for _, k := range links {
		if k.Name == name {
			l = k
		}
	}
	switch {
	case l.Name == "":
		return "no longer needed: the link is gone", nil
	case l.Alias != d.mark:
		return "", refusef("link %s does not carry this underlay's mark %q: not touched", name, d.mark)
	}
	locks := []keylock.Req{keylock.Exclusive(keylock.ParentKey(l.Name))}
	if lower, ok := rules.LinkByIndex(links, l.ParentIndex); ok && l.ParentIndex > 0 {
		locks = append(locks, keylock.Exclusive(keylock.ParentKey(lower.Name)))
	}
	_, unlock, err := d.locks.Acquire(ctx, locks...)
	if err != nil {
		return "", err
	}
	defer unlock()
	// The same test as reconcile's for strays, on the state under the locks.
	s, err := d.reconcile.Snapshot(true, l)
	if err != nil {
		return "", err
	}
	if s.Recorded(name) {
		return "no longer needed: a record owns link " + name + " now", nil
	}
	for _, st := range rules.PlanFollow(s, links, d.mark) {
		if st.To == name {
			return "", refusef("link %s is the VLAN %s that underlay created, renamed (%s): its record follows it; not deleted", name, st.Name, st.Why)
		}
	}
	if on := rules.StandsOn(links, l); len(on) > 0 {
		return "", refusef("links stand on %s (%v): deleting it would take them with it; not deleted", name, on)
	}
	if err := d.owned.Delete(ctx, name, false); err != nil {
		return "", err
	}
	d.log.Warn("doctor: deleted link carrying underlay's mark that no record owns", "link", name)
	return "deleted " + name, nil
}

// RollbackExpired rolls back a network whose reservation expired, as the
// janitor does: without waiting for the network's lock, which the create
// that hung still holds; the janitor then releases its parent link.
func (d *Driver) RollbackExpired(_ context.Context, id string) (string, error) {
	n, err := d.network(id)
	switch {
	case err != nil:
		return "", err
	case n == nil || n.Pending == nil:
		return "no longer needed: the network is no longer pending", nil
	case d.now().Before(n.Pending.Deadline):
		return "", refusef("the reservation of network %s has not expired (deadline %s)", dockerid.Short(id), n.Pending.Deadline.Format(time.RFC3339))
	}
	if _, err := d.reconcile.DropPending(id, n.Pending.Token); err != nil {
		return "", err
	}
	d.events.ReservationRolledBack("network")
	d.log.Warn("doctor: rolled back network whose reservation expired", "network", id, "parent", n.Parent)
	return fmt.Sprintf("rolled back network %s (the janitor releases its parent %s when nothing needs it)", dockerid.Short(id), n.Parent), nil
}

// StaleGrace is how old a record must be before Docker's 404 is believed.
func (d *Driver) StaleGrace() time.Duration { return d.grace }

// CreateWindow is the longest a CreateNetwork may take from its IPAM pool
// to its commit: the stale check's lookup and grace, and the pending
// reservation's deadline. A pool younger than that may belong to a create
// still under way.
func (d *Driver) CreateWindow() time.Duration { return d.lookup + d.grace + d.pending }
