package reconcile

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
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
					x.seen.reset() // what was missed is the pass's to see
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
				case ev, ok := <-events:
					if !ok {
						break drain
					}
					x.note(ev) // the pass sees it; the next event is compared with it
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
// address) is looked at; an event that shows an owned or watched link as
// its last one did is not (the kernel announces a link again, unchanged,
// whenever a link is made on it or deleted from it: every container's
// start and stop on a parent), unless a repair waits for a base link.
// While a repair waits for a base link, a new link other than an
// endpoint's or a host link's may be it.
func (x *Executor) Relevant(ev netlinkutil.LinkEvent, waiting bool) bool {
	l := ev.Link
	if config.IsEndpointLinkName(l.Name) {
		return false
	}
	ours := l.Alias == x.Mark
	if ev.Deleted && ours && x.Deleting.Claim(l.Index) {
		x.note(ev)
		return false // underlay's own deletion
	}
	changed := x.note(ev)
	if x.Watches(l.Name) && !ev.AddrRemoved {
		return changed || waiting // a parent joined endpoints stand on: gone, back, changed
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
		return changed || waiting
	}
	return waiting && !config.IsShimName(l.Name)
}

// note keeps what an event shows of an owned or watched link, by its
// index (a deletion, or a link neither owned nor watched, forgets it), and
// reports whether it differs from what the link's last event showed, its
// name included (true for a link not kept, a deletion or an address's
// removal).
func (x *Executor) note(ev netlinkutil.LinkEvent) bool {
	l := ev.Link
	switch {
	case ev.AddrRemoved || config.IsEndpointLinkName(l.Name):
		return true
	case ev.Deleted || l.Alias != x.Mark && !x.Watches(l.Name):
		x.seen.forget(func(k kernel.Link) bool { return k.Index == l.Index })
		return true
	}
	return x.seen.keep(l)
}

// ForgetLink makes the next event of the link of that name a repair
// pass's business even if it shows the link unchanged: what a pass makes
// of it changed outside the kernel (a network created on it, which may
// need an owned parent that is down healed).
func (x *Executor) ForgetLink(name string) {
	x.seen.forget(func(k kernel.Link) bool { return k.Name == name })
}

// seenLinks are owned and watched links, by index, as their last events
// showed them.
type seenLinks struct {
	mu    sync.Mutex
	links map[int]kernel.Link
}

// keep records l and reports whether it differs from the link of its
// index last recorded (true when there was none).
func (s *seenLinks) keep(l kernel.Link) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.links == nil {
		s.links = map[int]kernel.Link{}
	}
	prev, ok := s.links[l.Index]
	s.links[l.Index] = l
	return !ok || !sameLink(prev, l)
}

// forget drops the links drop says.
func (s *seenLinks) forget(drop func(kernel.Link) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.links, func(_ int, l kernel.Link) bool { return drop(l) })
}

// reset forgets every link (events were missed).
func (s *seenLinks) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.links = nil
}

// sameLink reports whether a and b show a link alike in every attribute.
func sameLink(a, b kernel.Link) bool {
	an, bn := a.AltNames, b.AltNames
	a.AltNames, b.AltNames = nil, nil
	return reflect.DeepEqual(a, b) && slices.Equal(an, bn)
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
