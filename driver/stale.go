package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
)

// The stale-holder check: a conflicting holder is a stale record (its
// network was removed while underlay could not see it) only if Docker
// says, in its own words, that it does not know the network, and the
// holder is old enough for Docker to have stored it: libnetwork calls the
// driver's CreateNetwork before it writes the network to its own store, so
// a holder created a moment ago is unknown to Docker yet.
//
// The check is bounded as a whole: every holder is asked at once, the first
// live or unanswerable holder ends it (refused), and a grace wait follows
// only when Docker said 404 for a holder younger than the grace period.

// answer is what Docker said of one holder.
type answer struct {
	holder store.Network
	live   bool
	err    error
}

// askDocker asks Docker about every holder concurrently. It returns the
// first holder Docker knows or could not answer for (nil when Docker said
// 404 for all of them) without waiting for the other answers.
func (d *Driver) askDocker(ctx context.Context, holders []store.Network) *answer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(holders))
	for _, h := range holders {
		go func() {
			live, err := d.docker.NetworkExists(ctx, h.ID)
			answers <- answer{holder: h, live: live, err: err}
		}()
	}
	for range holders {
		if a := <-answers; a.live || a.err != nil {
			return &a
		}
	}
	return nil
}

// clearStaleHolders rules out stale holders: if Docker no longer knows any
// of them, they are removed; otherwise the create is refused naming them
// and nothing changes. The returned function releases the holders' network
// locks. The caller holds the parent lock.
func (d *Driver) clearStaleHolders(ctx context.Context, want store.Network, asked string, cs []rules.Conflict) (func(), error) {
	var unlocks []func()
	release := func() {
		for _, u := range unlocks {
			u()
		}
	}
	if d.docker == nil {
		return release, rules.ConflictError(want, asked, cs)
	}
	holders := make([]store.Network, len(cs))
	for i, c := range cs {
		holders[i] = c.Holder
	}
	// One deadline for the whole check: a lookup's time on Docker plus the
	// grace wait, however many holders and however many questions.
	checkCtx, cancel := context.WithTimeout(ctx, d.lookup+d.grace)
	defer cancel()
	if err := d.refuseIfLive(checkCtx, want, asked, cs, holders); err != nil {
		return release, err
	}
	// Docker said 404 for every holder. Those younger than the grace period
	// may be networks libnetwork has not stored yet: wait until the
	// youngest is old enough, then ask about them again.
	var young []store.Network
	var wait time.Duration
	now := d.now()
	for _, h := range holders {
		// A clock stepped back makes a holder look younger than it can be:
		// the wait is never longer than the grace period.
		if age := min(max(now.Sub(h.Created), 0), d.grace); !h.Created.IsZero() && age < d.grace {
			young = append(young, h)
			wait = max(wait, d.grace-age)
		}
	}
	if len(young) > 0 {
		d.log.Info("Docker does not know a conflicting holder yet, but it is younger than the grace period: asking again when it is old enough",
			"network", want.ID, "holder", young[0].ID, "holders", len(young), "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return release, fmt.Errorf("waiting to ask Docker again about network %s, which holds parent %s: %w", dockerid.Short(young[0].ID), want.Parent, ctx.Err())
		case <-t.C:
		}
		if err := d.refuseIfLive(checkCtx, want, asked, cs, young); err != nil {
			return release, err
		}
	}
	// Lower-rank locks may only be tried while a parent lock is held.
	for _, c := range cs {
		unlock, ok := d.locks.TryExclusive(keylock.NetworkKey(c.Holder.ID))
		if !ok {
			return release, fmt.Errorf("%w: parent %s is held by stale network %s, which another request is using right now: retry in a moment",
				ErrConflict, want.Parent, dockerid.Short(c.Holder.ID))
		}
		unlocks = append(unlocks, unlock)
	}
	for _, c := range cs {
		d.log.Warn("removing stale holder: Docker no longer knows this network", "network", want.ID,
			"holder", c.Holder.ID, "parent", c.Holder.Parent, "holder_config", rules.Describe(c.Holder))
		if err := d.removeNetwork(ctx, c.Holder); err != nil {
			return release, fmt.Errorf("remove stale network %s from parent %s: %w", dockerid.Short(c.Holder.ID), c.Holder.Parent, err)
		}
		d.events.StaleRemoved()
	}
	return release, nil
}

// holdersRefused counts the answer of a create whose parent's holders
// refused it (clearStaleHolders' refusal, or what a move the new link
// refused answers), when it is a conflict, and returns it.
func (d *Driver) holdersRefused(err error) error {
	if errors.Is(err, ErrConflict) {
		d.events.ConflictRefused()
	}
	return err
}

// refuseIfLive asks Docker about holders and answers the refusal if any of
// them is live or Docker could not say.
func (d *Driver) refuseIfLive(ctx context.Context, want store.Network, asked string, cs []rules.Conflict, holders []store.Network) error {
	a := d.askDocker(ctx, holders)
	if a == nil {
		return nil
	}
	refusal := rules.ConflictError(want, asked, cs)
	if a.err != nil {
		d.log.Warn("could not ask Docker whether a conflicting holder still exists; treating it as live",
			"network", want.ID, "holder", a.holder.ID, "error", a.err)
		return fmt.Errorf("%w. Docker could not be asked whether network %s still exists, so it counts as live (%v): check --docker-host (DOCKER_HOST)",
			refusal, dockerid.Short(a.holder.ID), a.err)
	}
	return refusal
}
