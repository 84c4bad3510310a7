package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The repairs doctor --repair asks for, each answered with what was done
// (or why nothing was needed) or refused with a conflict (refusef).

// HealLink puts an owned link that exists but is broken back in order (set
// up, its address, its MTU; a renamed owned VLAN followed), as a repair
// pass does, for that link only: the plan is made again from the state
// now and carried out under the same locks.
func (o *Operator) HealLink(ctx context.Context, name string) (string, error) {
	links, err := o.Kernel.List(ctx)
	if err != nil {
		return "", err
	}
	s, err := o.Reconcile.Snapshot(true, links...)
	if err != nil {
		return "", err
	}
	o.Reconcile.ReadShimAddrs(ctx, &s, links)
	var todo []plan.Step
	for _, st := range plan.PlanRepair(s, links, o.Mark) {
		if (st.Op == plan.OpHeal || st.Op == plan.OpShim || st.Op == plan.OpFollow) && (st.Name == name || st.To == name) {
			todo = append(todo, st)
		}
	}
	if len(todo) == 0 {
		return "no longer needed: link " + name + " is healthy or not underlay's to heal", nil
	}
	out, err := o.Reconcile.ExecuteCounted(ctx, todo, "", o.Events.RepairAction)
	switch {
	case err != nil:
		return "", err
	case out.Busy:
		return "", refusef("link %s is in use by a request: try again", name)
	case out.Failed:
		return "", fmt.Errorf("could not heal link %s: see the daemon's log", name)
	}
	return "healed " + name + " (" + plan.StepsString(todo) + ")", nil
}

// RemoveStaleNetwork removes a network Docker does not know, as
// CreateNetwork removes a stale holder: only when the record is past the
// grace period and Docker itself answers that it has no such network.
func (o *Operator) RemoveStaleNetwork(ctx context.Context, id string) (string, error) {
	unlock, n, err := o.lockNetwork(ctx, id)
	if err != nil {
		return "", err
	}
	defer unlock()
	switch {
	case n == nil:
		return "no longer needed: the network is gone", nil
	case n.Pending != nil:
		return "", refusef("network %s is being created: not stale", dockerid.Short(id))
	case !n.Created.IsZero() && o.Now().Sub(n.Created) < o.Grace:
		return "", refusef("network %s was created %s ago, within the %s Docker may take to store it: not removed, run doctor again", dockerid.Short(id), o.Now().Sub(n.Created).Round(time.Millisecond), o.Grace)
	case o.Docker == nil:
		return "", refusef("network %s not removed: this daemon has no Docker API to confirm it is stale (--docker-host)", dockerid.Short(id))
	}
	exists, err := o.Docker.NetworkExists(ctx, id)
	if err != nil {
		return "", refusef("network %s not removed: the daemon's Docker could not confirm it is stale: %v", dockerid.Short(id), err)
	}
	if exists {
		return "", refusef("network %s not removed: the daemon's Docker knows it (is --docker-host the daemon's engine?)", dockerid.Short(id))
	}
	_, unlockParent, err := o.Locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if err != nil {
		return "", err
	}
	defer unlockParent()
	if err := o.Reconcile.RemoveNetwork(ctx, *n); err != nil {
		return "", fmt.Errorf("remove stale network %s: %w", dockerid.Short(id), err)
	}
	o.Events.StaleRemoved()
	o.Log.Warn("doctor: removed stale network Docker does not know", "network", id, "parent", n.Parent)
	return fmt.Sprintf("removed network %s and its links from %s", dockerid.Short(id), n.Parent), nil
}

// lockNetwork takes a network's lock exclusively and reads its record (nil
// when there is none).
func (o *Operator) lockNetwork(ctx context.Context, id string) (func(), *record.Network, error) {
	_, unlock, err := o.Locks.Acquire(ctx, keylock.Exclusive(keylock.NetworkKey(id)))
	if err != nil {
		return nil, nil, err
	}
	n, err := store.ReadNetwork(o.Store, id)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return unlock, n, nil
}

// RecreateParent re-creates a missing parent link underlay owns and a
// network needs.
func (o *Operator) RecreateParent(ctx context.Context, name string) (string, error) {
	s, err := o.Reconcile.Snapshot(false)
	if err != nil {
		return "", err
	}
	owned, ok := s.Owned[name]
	switch {
	case !ok || s.Use[name] == 0:
		return "no longer needed: no network needs an owned link " + name, nil
	}
	if _, err := o.Kernel.Get(ctx, name); err == nil {
		return "no longer needed: it is there", nil
	}
	out, err := o.Reconcile.Execute(ctx, []plan.Step{{Op: plan.OpRecreate, Name: name, Parent: owned, Why: "doctor --repair"}}, "")
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
func (o *Operator) DeleteOrphanLink(ctx context.Context, name string) (string, error) {
	links, err := o.Kernel.List(ctx)
	if err != nil {
		return "", err
	}
	var l kernel.Link
	for _, k := range links {
		if k.Name == name {
			l = k
		}
	}
	switch {
	case l.Name == "":
		return "no longer needed: the link is gone", nil
	case l.Alias != o.Mark:
		return "", refusef("link %s does not carry this underlay's mark %q: not touched", name, o.Mark)
	}
	locks := []keylock.Req{keylock.Exclusive(keylock.ParentKey(l.Name))}
	if lower, ok := plan.LinkByIndex(links, l.ParentIndex); ok && l.ParentIndex > 0 {
		locks = append(locks, keylock.Exclusive(keylock.ParentKey(lower.Name)))
	}
	_, unlock, err := o.Locks.Acquire(ctx, locks...)
	if err != nil {
		return "", err
	}
	defer unlock()
	// The same test as reconcile's for strays, on the state under the locks.
	s, err := o.Reconcile.Snapshot(true, l)
	if err != nil {
		return "", err
	}
	if s.Recorded(name) {
		return "no longer needed: a record owns link " + name + " now", nil
	}
	for _, st := range plan.PlanFollow(s, links, o.Mark) {
		if st.To == name {
			return "", refusef("link %s is the VLAN %s that underlay created, renamed (%s): its record follows it; not deleted", name, st.Name, st.Why)
		}
	}
	if on := plan.StandsOn(links, l); len(on) > 0 {
		return "", refusef("links stand on %s (%v): deleting it would take them with it; not deleted", name, on)
	}
	if err := o.Owned.Delete(ctx, name, false); err != nil {
		return "", err
	}
	o.Log.Warn("doctor: deleted link carrying underlay's mark that no record owns", "link", name)
	return "deleted " + name, nil
}

// RollbackExpired rolls back a network whose reservation expired, as the
// janitor does: without waiting for the network's lock, which the create
// that hung still holds; the janitor then releases its parent link.
func (o *Operator) RollbackExpired(_ context.Context, id string) (string, error) {
	n, err := store.ReadNetwork(o.Store, id)
	switch {
	case err != nil:
		return "", err
	case n == nil || n.Pending == nil:
		return "no longer needed: the network is no longer pending", nil
	case o.Now().Before(n.Pending.Deadline):
		return "", refusef("the reservation of network %s has not expired (deadline %s)", dockerid.Short(id), n.Pending.Deadline.Format(time.RFC3339))
	}
	if _, err := o.Reconcile.DropPending(id, n.Pending.Token); err != nil {
		return "", err
	}
	o.Events.ReservationRolledBack("network")
	o.Log.Warn("doctor: rolled back network whose reservation expired", "network", id, "parent", n.Parent)
	return fmt.Sprintf("rolled back network %s (the janitor releases its parent %s when nothing needs it)", dockerid.Short(id), n.Parent), nil
}
