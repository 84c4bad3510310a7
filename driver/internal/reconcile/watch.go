package reconcile

import (
	"context"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// Live repair: the links underlay owns (VLAN and dummy parents, host
// links) are re-made when they go away while networks need them. A watcher
// reads the kernel's link events; a deleted link carrying this instance's
// mark (or, while a repair is waiting for a base link, any new link)
// starts a repair pass, which is the reconcile planner's re-create steps
// over a fresh snapshot, executed under the same parent locks as requests
// (tried: a busy one is retried shortly). Links without the mark are never
// touched.

// Repair runs one repair pass over a fresh snapshot, with the executor
// every plan uses.
func (x *Executor) Repair(ctx context.Context) (Outcome, error) {
	links, err := x.Kernel.List(ctx)
	if err != nil {
		return Outcome{Failed: true}, err
	}
	s, err := x.Snapshot(true, links...)
	if err != nil {
		return Outcome{Failed: true}, err
	}
	x.ReadShimAddrs(ctx, &s, links)
	var todo []plan.Step
	for _, st := range plan.PlanRepair(s, links, x.Mark) {
		if st.Op != plan.OpRoutes {
			todo = append(todo, st)
		}
	}
	var out Outcome
	if len(todo) > 0 {
		x.Log.Debug("repair pass", "plan", plan.StepsString(todo))
		if out, err = x.ExecuteCounted(ctx, todo, "", x.Events.RepairAction); err != nil {
			return out, err
		}
		if links, err = x.Kernel.List(ctx); err != nil { // the parents it made, for the containers on them
			out.Failed = true
			return out, err
		}
	}
	busy, next, err := x.repairContainers(ctx, links)
	out.Busy, out.Next = out.Busy || busy, next
	return out, err
}

// Watch repairs owned links as they go away, until ctx ends: it is started
// after Restore and runs beside the janitor. A subscription that ends (a
// socket overrun loses events) is made again after a second, followed by a
// repair pass for what was missed.
func (x *Executor) Watch(ctx context.Context) error {
	events, err := x.subscribe(ctx)
	if err != nil {
		return err
	}
	go func() {
		waiting := true // one pass at once: a link may have gone since Restore
		timed := false  // a pass is due at a container's wait's end
		retry := time.NewTimer(0)
		for {
			trigger := false
			select {
			case <-ctx.Done():
				retry.Stop()
				return
			case ev, ok := <-events:
				if !ok {
					x.Log.Warn("link events: the subscription ended; subscribing again")
					for events == nil || !ok {
						select {
						case <-ctx.Done():
							return
						case <-time.After(time.Second):
						}
						if events, err = x.subscribe(ctx); err == nil {
							ok = true
						}
					}
					waiting, trigger = true, true
					break
				}
				trigger = x.Relevant(ev, waiting)
			case <-retry.C:
				trigger, timed = waiting || timed, false
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
			out, err := x.Repair(ctx)
			if err != nil {
				x.Log.Error("repair pass failed", "error", err)
			}
			// A missing base comes back as a link event; a busy lock or a
			// failed pass is tried again shortly; a parent containers wait
			// for is given up at out.Next.
			waiting = out.Failed || out.Busy || err != nil
			switch {
			case out.Busy || err != nil:
				retry.Reset(time.Second)
			case !out.Next.IsZero():
				retry.Reset(max(time.Until(out.Next), 10*time.Millisecond))
				timed = true
			}
		}
	}()
	return nil
}

// Relevant reports whether a link event calls for a repair pass. Endpoint
// links come and go with every container (moved into sandboxes, deleted):
// only parents and host links are repaired, and containers' interfaces
// after their parent link (any link joined endpoints stand on) changed. A link of this instance that
// underlay deletes itself is no repair; one that went away otherwise is
// logged once. A change of one (set down, renamed, its MTU or a host link's
// address) is looked at. While a repair waits for a base link, a new link
// other than an endpoint's or a host link's may be it.
func (x *Executor) Relevant(ev netlinkutil.LinkEvent, waiting bool) bool {
	l := ev.Link
	if config.IsEndpointLinkName(l.Name) {
		return false
	}
	ours := l.Alias == x.Mark
	if ev.Deleted && ours && x.Deleting.Claim(l.Index) {
		return false // underlay's own deletion
	}
	if x.Watches(l.Name) && !ev.AddrRemoved {
		return true // a parent joined endpoints stand on: gone, back, changed
	}
	switch {
	case ev.Deleted:
		if !ours {
			return false
		}
		x.Log.Warn("a link underlay owns went away; re-making it if networks need it", "link", l.Name, "kind", l.Kind)
		return true
	case ev.AddrRemoved:
		return ours && kernel.IsEndpointKind(l.Kind)
	case ours:
		return true
	}
	return waiting && !config.IsShimName(l.Name)
}

// subscribe opens the link event stream.
func (x *Executor) subscribe(ctx context.Context) (<-chan netlinkutil.LinkEvent, error) {
	return x.Kernel.Subscribe(ctx, func(err error) {
		if ctx.Err() != nil {
			return // the socket closing at shutdown, not an overrun
		}
		x.Log.Warn("link events: receive error", "error", err)
	})
}
