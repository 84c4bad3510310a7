package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/owned"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Carrying out the plans of plan.go (deleting, re-creating and following
// owned links is driver/internal/owned's).

// readSnapshot reads the planners' view of the state in one transaction.
// With links (reconcile and repair), it also reads which of those links
// carrying this instance's mark are endpoint links on record, and the
// networks with a host address: nothing it reads grows with the number of
// endpoints.
func (d *Driver) readSnapshot(withEndpoints bool, links ...netlinkutil.Link) (rules.Snapshot, error) {
	s := rules.Snapshot{Owned: map[string]store.ParentLink{}}
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		if s.Pending, err = tx.Pending(); err != nil {
			return err
		}
		s.Use = tx.ParentUse()
		parents, err := tx.ParentLinks()
		for _, p := range parents {
			s.Owned[p.Name] = p
		}
		if err != nil {
			return err
		}
		if withEndpoints {
			s.EndpointLinks = map[string]bool{}
			for _, l := range links {
				if l.Alias != d.mark {
					continue
				}
				if _, known, err := tx.EndpointByLink(l.Name); err != nil {
					return err
				} else if known {
					s.EndpointLinks[l.Name] = true
				}
			}
			s.Shims, err = d.readShims(tx)
		}
		return err
	})
	return s, err
}

// readShims lists the networks with a host address and their routes.
func (d *Driver) readShims(tx *store.Tx) (map[string]rules.ShimState, error) {
	out := map[string]rules.ShimState{}
	err := tx.ForEachNetworkWithHostAddress(func(n store.Network) error {
		if n.HostAddress == "" || n.Pending != nil {
			return nil
		}
		routes, err := d.joins.JoinedV4(tx, n.ID, d.boot)
		out[rules.ShimName(n.ID)] = rules.ShimState{Network: n, Routes: routes}
		return err
	})
	return out, err
}

// outcome is how far a plan got: busy when a parent lock was taken by a
// request (try again shortly), failed when a link could not be made (its
// base is missing: try again when links come back).
type outcome struct{ busy, failed bool }

// execute carries out a plan in order. held is the parent link whose lock
// the caller holds ("" for none); the lock of every other link a step
// makes or deletes is only tried, and the first busy one ends those steps.
// Every such step re-checks the store under the lock, since the plan was
// made from a snapshot. Failed steps are logged (store errors joined); the
// others still run.
func (d *Driver) execute(ctx context.Context, plan []rules.Step, held string) (outcome, error) {
	return d.executeCounted(ctx, plan, held, nil)
}

// executeCounted is execute telling done (when not nil) the op of every
// step it carried out: not skipped or busy behind a request's lock, not
// failed.
func (d *Driver) executeCounted(ctx context.Context, plan []rules.Step, held string, done func(op string)) (outcome, error) {
	var errs []error
	var out outcome
	busy := false
	for _, s := range plan {
		log := d.log.With("step", s.Op.String(), "link", s.Name, "why", s.Why)
		var err error // the step's failure; owned.ErrBusy when it waits for a lock
		switch s.Op {
		case rules.OpRollback:
			log.Warn("rolling back network left half-created by a previous run", "network", s.Name)
			var parent string
			if parent, err = d.dropPending(s.Name, ""); err != nil {
				errs = append(errs, fmt.Errorf("roll back network %s: %w", dockerid.Short(s.Name), err))
			} else if parent != "" {
				d.events.ReservationRolledBack("network")
			}
		case rules.OpRecreate, rules.OpShim, rules.OpRoutes, rules.OpHeal, rules.OpFollow:
			// Steps that make or heal a link under its parent's lock: a
			// failure waits for the watcher (the base may be gone; the
			// networks stay, and the next request on them reports it).
			run, failure := d.recreate, "could not re-create a parent link underlay created"
			switch s.Op {
			case rules.OpShim, rules.OpRoutes:
				run, failure = d.repairShim, "could not make the host link of a network"
			case rules.OpHeal, rules.OpFollow:
				run, failure = d.heal, "could not put an owned link back in order"
			}
			var ran bool
			if ran, err = tryLocked(&busy, func() error { return run(ctx, s, held) }); !ran {
				continue
			}
			if err != nil {
				d.failures.Warn(log, s.Name, failure, err)
				out.failed = true
			} else {
				d.failures.Clear(s.Name)
				if s.Op == rules.OpShim {
					log.Warn("made the missing host link of a network, with its routes")
				}
			}
		case rules.OpKeep:
			log.Warn("keeping a link underlay created that no network needs")
		case rules.OpForget, rules.OpRelease:
			var ran bool
			if ran, err = tryLocked(&busy, func() error { return d.release(ctx, s, held) }); !ran {
				continue
			}
			if err != nil {
				errs = append(errs, err)
			}
		case rules.OpRepoint:
			log.Warn("moving networks recorded on an altname to the link's kernel name", "to", s.To)
			if err = d.owned.Repoint(s.Name, s.To); err != nil {
				errs = append(errs, fmt.Errorf("move the networks on %s to %s: %w", s.Name, s.To, err))
			}
		case rules.OpDeleteStray:
			log.Warn("deleting link no record owns")
			if err = d.owned.Delete(ctx, s.Name, false); err != nil {
				errs = append(errs, err)
			}
		}
		if err == nil && done != nil {
			done(s.Op.String())
		}
	}
	out.busy = busy
	return out, errors.Join(errs...)
}

// tryLocked runs a step that takes a parent link's lock (tryParent),
// unless an earlier step found its lock busy: then, and when this one
// finds it busy (*busy becomes true), the step did not run.
func tryLocked(busy *bool, run func() error) (ran bool, err error) {
	if *busy {
		return false, nil
	}
	if err = run(); errors.Is(err, owned.ErrBusy) {
		*busy = true
		return false, err
	}
	return true, err
}

// recreate makes a missing parent link underlay owns, under its lock
// (tried unless held), if a network still needs it.
func (d *Driver) recreate(ctx context.Context, s rules.Step, held string) error {
	unlock, err := d.owned.TryParent(s.Name, held)
	if err != nil {
		return err
	}
	defer unlock()
	var still bool
	if err := d.store.View(func(tx *store.Tx) error {
		_, ok, err := tx.ParentLink(s.Name)
		still = ok && owned.Needed(tx, s.Name)
		return err
	}); err != nil || !still {
		return err
	}
	d.log.Warn("re-creating missing parent link underlay created", "link", s.Name, "kind", s.Parent.Kind, "why", s.Why)
	return d.parents.Create(ctx, s.Parent)
}

// release deletes (opRelease) or only forgets (opForget) an owned parent
// link, under its lock, if the store still says nothing needs it.
func (d *Driver) release(ctx context.Context, s rules.Step, held string) error {
	unlock, err := d.owned.TryParent(s.Name, held)
	if err != nil {
		return err
	}
	defer unlock()
	var still bool
	if err := d.store.View(func(tx *store.Tx) error {
		_, ok, err := tx.ParentLink(s.Name)
		still = ok && !owned.Needed(tx, s.Name)
		return err
	}); err != nil || !still {
		return err
	}
	if s.Op == rules.OpRelease {
		if err := d.owned.Delete(ctx, s.Name, true); err != nil {
			return fmt.Errorf("delete parent link %s: %w", s.Name, err)
		}
		d.log.Info("deleted parent link underlay created", "parent", s.Name)
	} else {
		d.log.Info("forgetting parent link underlay created", "parent", s.Name, "why", s.Why)
	}
	return d.store.Update(func(tx *store.Tx) error {
		if owned.Needed(tx, s.Name) {
			return nil
		}
		return tx.DeleteParentLink(s.Name)
	})
}

// releaseParent deletes the parent link underlay created for a network
// once nothing needs it (and its base, likewise). The caller holds the
// parent's lock; the others are only tried.
func (d *Driver) releaseParent(ctx context.Context, name string) error {
	s, err := d.readSnapshot(false)
	if err != nil {
		return err
	}
	if _, owned := s.Owned[name]; !owned {
		return nil
	}
	links, err := d.links.List(ctx)
	if err != nil {
		return err
	}
	_, err = d.execute(ctx, rules.PlanRelease(s, links, d.mark, []string{name}), name)
	return err
}
