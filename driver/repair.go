package driver

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Live repair: the links underlay owns (VLAN and dummy parents, host
// links) are re-made when they go away while networks need them. A watcher
// reads the kernel's link events; a deleted link carrying this instance's
// mark (or, while a repair is waiting for a base link, any new link)
// starts a repair pass, which is the reconcile planner's re-create steps
// over a fresh snapshot, executed under the same parent locks as requests
// (tried: a busy one is retried shortly). Links without the mark are never
// touched.

// shimState is a network with a host address and the /32 routes its host
// link carries.
type shimState struct {
	Network store.Network
	Routes  []netip.Addr
}

// repairShim makes a host link (opShim) or puts its routes back (opRoutes)
// under the network's parent lock, tried unless held.
func (d *Driver) repairShim(ctx context.Context, s step, held string) error {
	n := s.Shim.Network
	if n.Parent != held {
		unlock, ok := d.locks.tryExclusive(parentLock(n.Parent))
		if !ok {
			return errBusy
		}
		defer unlock()
	}
	// Under the lock, the store says what is true now: the network may
	// have gone, and the routes are read again (Leave removes a route and
	// commits under this lock).
	var routes []netip.Addr
	var cur *store.Network
	if err := d.store.View(func(tx *store.Tx) error {
		nv, ok, err := tx.Network(n.ID)
		if err != nil || !ok {
			return err
		}
		cur = &nv
		routes, err = d.joinedRoutes(tx, n.ID)
		return err
	}); err != nil || cur == nil || cur.HostAddress != n.HostAddress || cur.Parent != n.Parent {
		return err // the network went away or changed meanwhile
	}
	return d.ensureShim(ctx, *cur, routes)
}

// planRepair is what a repair pass does: the needed owned parent links
// that are missing (bases first) and the host links with their routes.
func planRepair(s snapshot, links []netlinkutil.Link, mark string) []step {
	var plan []step
	for _, st := range planRestore(snapshot{Use: s.Use, Owned: s.Owned, Shims: s.Shims}, links, mark) {
		if st.Op == opRecreate || st.Op == opShim || st.Op == opRoutes {
			plan = append(plan, st)
		}
	}
	return plan
}

// repair runs one repair pass. It reports whether everything needed is in
// place (false: a base is missing or a lock was busy; try again later).
// Steps that cannot be done yet are logged at DEBUG: the first pass logs
// the loss at WARN.
func (d *Driver) repair(ctx context.Context) (complete bool, err error) {
	links, err := d.links.List(ctx)
	if err != nil {
		return false, err
	}
	s, err := d.readSnapshot(true, links...)
	if err != nil {
		return false, err
	}
	plan := planRepair(s, links, d.mark)
	var todo []step
	for _, st := range plan {
		if st.Op != opRoutes {
			todo = append(todo, st)
		}
	}
	if len(todo) == 0 {
		return true, nil
	}
	d.log.Debug("repair pass", "plan", stepsString(todo))
	for _, st := range todo {
		switch st.Op {
		case opRecreate:
			unlock, ok := d.locks.tryExclusive(parentLock(st.Name))
			if !ok {
				return false, nil
			}
			var still bool
			err := d.store.View(func(tx *store.Tx) error {
				_, owned, err := tx.ParentLink(st.Name)
				still = owned && parentNeeded(tx, st.Name)
				return err
			})
			if err == nil && still {
				err = d.createParentLink(ctx, st.Parent)
			}
			unlock()
			if err != nil {
				d.log.Debug("cannot re-make a parent link yet (its base is missing?): waiting for links to come back", "link", st.Name, "error", err)
				return false, nil
			}
			d.log.Warn("re-made a parent link underlay owns", "link", st.Name)
		case opShim:
			if err := d.repairShim(ctx, st, ""); errors.Is(err, errBusy) {
				return false, nil
			} else if err != nil {
				d.log.Debug("cannot re-make a host link yet: waiting for links to come back", "link", st.Name, "error", err)
				return false, nil
			}
			d.log.Warn("re-made the host link of a network with its routes", "link", st.Name)
		}
	}
	return true, nil
}

func stepsString(steps []step) string {
	s := ""
	for i, st := range steps {
		if i > 0 {
			s += " "
		}
		s += st.String()
	}
	return s
}

// Watch repairs owned links as they go away, until ctx ends: it is started
// after Restore and runs beside the janitor.
func (d *Driver) Watch(ctx context.Context) error {
	events, err := d.links.Subscribe(ctx, func(err error) {
		d.log.Error("link events: the subscription failed; links are repaired at the next start", "error", err)
	})
	if err != nil {
		return err
	}
	go func() {
		waiting := false
		retry := time.NewTimer(time.Hour)
		retry.Stop()
		for {
			trigger := false
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Deleted && ev.Link.Alias == d.mark {
					d.log.Warn("a link underlay owns went away; re-making it if networks need it", "link", ev.Link.Name, "kind", ev.Link.Kind)
				}
				trigger = (ev.Deleted && ev.Link.Alias == d.mark) || (!ev.Deleted && waiting)
			case <-retry.C:
				trigger = waiting
			}
			if !trigger {
				continue
			}
			// Let a burst of events (a base taking its stack with it)
			// settle, then repair once.
			settle := time.NewTimer(100 * time.Millisecond)
		drain:
			for {
				select {
				case <-ctx.Done():
					settle.Stop()
					return
				case _, ok := <-events:
					if !ok {
						break drain
					}
				case <-settle.C:
					break drain
				}
			}
			complete, err := d.repair(ctx)
			if err != nil {
				d.log.Error("repair pass failed", "error", err)
			}
			waiting = !complete || err != nil
			if waiting {
				retry.Reset(time.Second) // a busy lock; a missing base also comes back as an event
			}
		}
	}()
	return nil
}
