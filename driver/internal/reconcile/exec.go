// Package reconcile makes the kernel, the state and Docker agree, and
// shows the operator where they do not. It carries out the planners' plans
// (driver/internal/plan): the restore before the socket is served
// (Restore), the janitor's ticks (JanitorTick), the live repair's passes
// and the link watcher that starts them (Repair, Watch), the release of a
// network's parent link and the rollback of reservations (ReleaseParent,
// UndoCreate, DropPending), all through one executor (Execute) whose
// steps re-check the store under the parent locks they try. The
// operator's view of the daemon (Operator.Inventory: underlay ls,
// underlay doctor; operator.go) and the repairs doctor --repair asks for
// (repairs.go) are here too: each repair checks its finding again under
// the locks a request would take and acts by the same rules, through the
// same executor: nothing is removed that Docker knows or that underlay
// does not own. CreateNetwork's stale-holder check is here as well: whether
// Docker, in its own words, no longer knows every network that holds a
// parent the request needs, asked at once and again after the grace
// period for the young ones (Checker, stale.go), and, once it said so, the
// holders locked (only tried: the caller holds the parent's) and removed
// through the executor (Holders, holders.go).
//
// Rule: the kernel only through netlinkutil.Links, the store only through
// links.Store, Docker only through NetworkChecker; parent locks are
// only tried (links.Owned), never waited for; owned links are deleted,
// re-created and followed, and host links made, only through
// driver/internal/links; what to do is package plan's.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/underlay-net/underlay/driver/internal/joins"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
)

// Events is told what the executor and the repairs did, for counting
// (driver.Events).
type Events interface {
	ConflictRefused()
	StaleRemoved()
	ReservationRolledBack(kind string)
	ReconcileAction(op string)
	RepairAction(op string)
	ContainerRepair(result string)
}

// Executor carries out plans for this instance (Mark) in this boot (Boot).
type Executor struct {
	Kernel  netlinkutil.Links
	Store   links.Store
	Owned   *links.Owned // deleting, re-creating, following owned links
	Parents *links.Maker // creating a missing owned parent link
	Shims   *links.Shims // making host links and their routes
	Joins   *joins.Table // the joined endpoints a host link routes to
	// IfNames, Leases and LAN are told of a removed network's endpoints
	// (RemoveNetwork); nil: none to tell.
	IfNames *joins.IfNames
	Leases  *leases.Leases
	LAN     *lan.LAN
	// CrashPoint, when set, is called at each named step of RemoveNetwork
	// (the driver's crash points, for tests that kill the daemon there).
	CrashPoint func(name string)
	Mark       string
	Boot       string
	Log        *slog.Logger
	Now        func() time.Time
	Events     Events
	// Deleting are the links underlay deletes itself (links.Owned tells
	// it), which the watcher does not repair.
	Deleting *links.SelfDeletions
	// Removed, when set, is told the ID of a network RemoveNetwork
	// removed, once its record is gone (the driver forgets its LAN
	// preflight).
	Removed func(id string)
	// Sandboxes makes joined endpoints' interfaces again in their
	// containers after their parent link was made again; nil makes none
	// (containers.go). ContainerWait bounds the wait for a missing
	// parent; zero makes none. Locks are the requests' locks, the
	// endpoint's taken for each.
	Sandboxes     Sandboxes
	ContainerWait time.Duration
	// SandboxDir, when set, is where containers' namespace files are
	// opened, by the SandboxKey's file name (SandboxPath).
	SandboxDir string
	Locks      *keylock.Locker
	// failures are the repair steps' last failures, logged once.
	failures   links.FailureLog
	containers containers
	// seen are owned and watched links as their last events showed them
	// (watch.go: an unchanged link's event is no repair).
	seen seenLinks
}

// Outcome is how far a steps got: busy when a parent lock was taken by a
// request (try again shortly), failed when a link could not be made (its
// base is missing: try again when links come back).
type Outcome struct {
	Busy, Failed bool
	// Next is when a repair pass must run again (a missing parent is
	// given up then); zero: on events only.
	Next time.Time
}

// Execute carries out a steps in order. held is the parent link whose lock
// the caller holds ("" for none); the lock of every other link a step
// makes or deletes is only tried, and the first busy one ends those steps.
// Every such step re-checks the store under the lock, since the steps was
// made from a snapshot. Failed steps are logged (store errors joined); the
// others still run.
func (x *Executor) Execute(ctx context.Context, steps []plan.Step, held string) (Outcome, error) {
	return x.ExecuteCounted(ctx, steps, held, nil)
}

// ExecuteCounted is Execute telling done (when not nil) the op of every
// step it carried out: not skipped or busy behind a request's lock, not
// failed.
func (x *Executor) ExecuteCounted(ctx context.Context, steps []plan.Step, held string, done func(op string)) (Outcome, error) {
	var errs []error
	var out Outcome
	busy := false
	for _, s := range steps {
		log := x.Log.With("step", s.Op.String(), "link", s.Name, "why", s.Why)
		var err error // the step's failure; links.ErrBusy when it waits for a lock
		switch s.Op {
		case plan.OpRollback:
			log.Warn("rolling back network left half-created by a previous run", "network", s.Name)
			var parent string
			if parent, err = x.DropPending(s.Name, ""); err != nil {
				errs = append(errs, fmt.Errorf("roll back network %s: %w", dockerid.Short(s.Name), err))
			} else if parent != "" {
				x.Events.ReservationRolledBack("network")
			}
		case plan.OpRecreate, plan.OpShim, plan.OpRoutes, plan.OpHeal, plan.OpFollow:
			// Steps that make or heal a link under its parent's lock: a
			// failure waits for the watcher (the base may be gone; the
			// networks stay, and the next request on them reports it).
			run, failure := x.recreate, "could not re-create a parent link underlay created"
			switch s.Op {
			case plan.OpShim, plan.OpRoutes:
				run, failure = x.repairShim, "could not make the host link of a network"
			case plan.OpHeal, plan.OpFollow:
				run, failure = x.heal, "could not put an owned link back in order"
			}
			var ran bool
			if ran, err = tryLocked(&busy, func() error { return run(ctx, s, held) }); !ran {
				continue
			}
			if err != nil {
				x.failures.Warn(log, s.Name, failure, err)
				out.Failed = true
			} else {
				x.failures.Clear(s.Name)
				if s.Op == plan.OpShim {
					log.Warn("made the missing host link of a network, with its routes")
				}
			}
		case plan.OpKeep:
			log.Warn("keeping a link underlay created that no network needs")
		case plan.OpForget, plan.OpRelease:
			var ran bool
			if ran, err = tryLocked(&busy, func() error { return x.release(ctx, s, held) }); !ran {
				continue
			}
			if err != nil {
				errs = append(errs, err)
			}
		case plan.OpRepoint:
			log.Warn("moving networks recorded on an altname to the link's kernel name", "to", s.To)
			if err = x.Owned.Repoint(s.Name, s.To); err != nil {
				errs = append(errs, fmt.Errorf("move the networks on %s to %s: %w", s.Name, s.To, err))
			}
		case plan.OpDeleteStray:
			log.Warn("deleting link no record owns")
			if err = x.Owned.Delete(ctx, s.Name, false); err != nil {
				errs = append(errs, err)
			}
		}
		if err == nil && done != nil {
			done(s.Op.String())
		}
	}
	out.Busy = busy
	return out, errors.Join(errs...)
}

// tryLocked runs a step that takes a parent link's lock (links.Owned.TryParent),
// unless an earlier step found its lock busy: then, and when this one
// finds it busy (*busy becomes true), the step did not run.
func tryLocked(busy *bool, run func() error) (ran bool, err error) {
	if *busy {
		return false, nil
	}
	if err = run(); errors.Is(err, links.ErrBusy) {
		*busy = true
		return false, err
	}
	return true, err
}
