package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store/record"
)

// Remover removes a network with its links and records.
type Remover interface {
	RemoveNetwork(ctx context.Context, n record.Network) error
}

// Holders rules out a create's conflicting holders: Docker is asked
// (Check), the stale ones are locked and removed, the live ones refuse.
type Holders struct {
	Check *Checker
	Locks keylock.Trier
	// Remover removes a network with its links and records
	// (reconcile.Executor); the caller holds the network's lock and its
	// parent's.
	Remover Remover
	Events  Events
	Log     *slog.Logger
}

// Clear rules out stale holders: if Docker no longer knows any of them,
// they are removed; otherwise the create is refused naming them and
// nothing changes. The returned function releases the holders' network
// locks. The caller holds the parent lock.
func (h *Holders) Clear(ctx context.Context, want record.Network, asked string, cs []plan.Conflict) (func(), error) {
	var unlocks []func()
	release := func() {
		for _, u := range unlocks {
			u()
		}
	}
	if err := h.Check.Check(ctx, want, asked, cs); err != nil {
		return release, err
	}
	// Lower-rank locks may only be tried while a parent lock is held.
	for _, c := range cs {
		unlock, ok := h.Locks.TryExclusive(keylock.NetworkKey(c.Holder.ID))
		if !ok {
			return release, fmt.Errorf("%w: parent %s is held by stale network %s, which another request is using right now: retry in a moment",
				pluginapi.ErrConflict, want.Parent, dockerid.Short(c.Holder.ID))
		}
		unlocks = append(unlocks, unlock)
	}
	for _, c := range cs {
		h.Log.Warn("removing stale holder: Docker no longer knows this network", "network", want.ID,
			"holder", c.Holder.ID, "parent", c.Holder.Parent, "holder_config", plan.Describe(c.Holder))
		if err := h.Remover.RemoveNetwork(ctx, c.Holder); err != nil {
			return release, fmt.Errorf("remove stale network %s from parent %s: %w", dockerid.Short(c.Holder.ID), c.Holder.Parent, err)
		}
		h.Events.StaleRemoved()
	}
	return release, nil
}

// Refused counts the answer of a create whose parent's holders refused it
// (Clear's refusal, or what a move the new link refused answers), when it
// is a conflict, and returns it.
func (h *Holders) Refused(err error) error {
	if errors.Is(err, pluginapi.ErrConflict) {
		h.Events.ConflictRefused()
	}
	return err
}
