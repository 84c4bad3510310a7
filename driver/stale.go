package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
)

// The stale-holder check: Docker's half (is every holder unknown to
// Docker, and old enough for that to be believed) is driver/internal/stale;
// the driver's half takes the holders' locks and removes them.

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
	if err := d.staleCheck.Check(ctx, want, asked, cs); err != nil {
		return release, err
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
