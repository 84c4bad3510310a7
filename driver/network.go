package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// CreateNetwork creates a network or, when its ID comes back, reuses or
// replaces it; see the rules in docs/networks.md. Its phases (create.go): parse
// the request, lock the network, reuse the recorded copy if nothing
// changed, resolve the requested parent to the kernel link it really is,
// refuse what the LAN preflight is certain of (macvlan on a wireless
// parent, lanpreflight.go), lock that link, decide over a snapshot of the store, clear the way (rule
// out stale holders with Docker, remove a stale copy), look at the link
// again if it may have changed, then reserve the parent durably, create
// the parent link if underlay owns it, and commit. On failure nothing of
// the new network is left behind; on success the rest of the LAN
// preflight starts in the background.
func (d *Driver) CreateNetwork(ctx context.Context, req *network.CreateNetworkRequest) error {
	c, err := newCreation(d, req)
	if err != nil {
		return err
	}
	ctx, unlockNet, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.NetworkKey(c.want.ID)))
	if err != nil {
		return err
	}
	defer unlockNet()
	if reused, err := c.reuseIfSame(ctx); reused || err != nil {
		return err
	}
	if err := c.resolveParent(ctx); err != nil {
		return err
	}
	if err := c.refuseOnLAN(ctx); err != nil {
		return err
	}
	unlockParents, err := c.lockParents(ctx)
	if err != nil {
		return err
	}
	defer unlockParents()
	if err := c.decide(); err != nil {
		return err
	}
	release, answered, err := c.clearTheWay(ctx)
	defer release()
	if answered || err != nil {
		return err
	}
	if err := c.recheckParent(ctx); err != nil {
		return err
	}
	if err := c.createNetwork(ctx); err != nil {
		return err
	}
	// The parent's next event is the watcher's business again, even
	// unchanged: a repair pass now has a network to keep it for.
	d.reconcile.ForgetLink(c.want.Parent)
	d.lanChecks.Start(c.want) // in the background: the create is answered now
	return nil
}

// createNetwork reserves, builds and commits the new network. create
// (c.res.Create) is the parent link to create, nil when it exists. The
// caller holds the network and parent locks and has ruled out conflicts.
func (c *creation) createNetwork(ctx context.Context) (err error) {
	d, want, create, refs := c.d, c.want, c.res.Create, c.refs
	if create == nil {
		// The parent exists: nothing changes in the kernel but the host's
		// link, if asked for, so one atomic write under the locks creates
		// the network.
		return c.commitWithShim(ctx, want, false, func(tx *store.Tx) error {
			want.Created = d.now() // the grace period of the stale check counts from here
			return commitNetwork(tx, want, refs)
		})
	}
	// A parent link must be created: claim the parent durably first, so a
	// crash or a hung kernel call is rolled back with what it made.
	want.Pending = &record.Reservation{Token: newToken(), Deadline: d.now().Add(d.pending)}
	want.Created = d.now()
	token := want.Pending.Token
	created := false // whether this request made the parent link
	d.point("create-network/before-reserve")
	if err := d.store.Batch(func(tx *store.Tx) error {
		if _, owned, err := tx.ParentLink(create.Name); err != nil {
			return err
		} else if !owned {
			if err := tx.PutParentLink(*create); err != nil {
				return err
			}
		}
		return tx.PutNetwork(want)
	}); err != nil {
		return fmt.Errorf("reserve parent %s for network %s: %w", want.Parent, dockerid.Short(want.ID), err)
	}
	d.point("create-network/after-reserve")
	defer func() {
		if err != nil {
			// Roll back with a context of our own: the request's may be
			// what failed.
			if rbErr := d.reconcile.UndoCreate(context.WithoutCancel(ctx), want.ID, token, create, created); rbErr != nil {
				d.log.Error("rollback of failed network left state behind; it is retried at the next start",
					"network", want.ID, "error", rbErr)
			}
		}
	}()
	d.point("create-network/before-parent-link")
	if err := d.parents.Create(ctx, *create); err != nil {
		return fmt.Errorf("create parent %s for network %s: %w", create.Name, dockerid.Short(want.ID), err)
	}
	created = true
	d.point("create-network/after-parent-link")
	return c.commitWithShim(ctx, want, true, func(tx *store.Tx) error {
		cur, ok, err := tx.Network(want.ID)
		if err != nil {
			return err
		}
		if !ok || cur.Pending == nil || cur.Pending.Token != token {
			return fmt.Errorf("the reservation of parent %s expired after %s and was rolled back (a kernel call hung): retry", want.Parent, d.pending)
		}
		cur.Pending = nil
		cur.Created = d.now()
		return commitNetwork(tx, cur, refs)
	})
}

// commitWithShim makes the network's host link, if it asks for one, then
// commits the network with commit; a failed commit deletes the host link
// again (the caller's own rollback undoes the rest).
func (c *creation) commitWithShim(ctx context.Context, want record.Network, parentCreated bool, commit func(*store.Tx) error) (err error) {
	d := c.d
	if err := d.shims.Ensure(ctx, want, nil); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = d.owned.Delete(context.WithoutCancel(ctx), config.ShimName(want.ID), true)
		}
	}()
	d.point("create-network/before-commit")
	if err := d.store.Batch(commit); err != nil {
		return fmt.Errorf("create network %s: %w", dockerid.Short(want.ID), err)
	}
	d.point("create-network/after-commit")
	want.Pending = nil
	if d.log.Enabled(ctx, slog.LevelInfo) { // describe is not free
		d.log.Info("created network", "network", want.ID, "parent", want.Parent, "asked", plan.RequestedParent(want), "config", plan.Describe(want), "parent_created", parentCreated)
	}
	return nil
}

// DeleteNetwork removes a network with its endpoints' links and the parent
// link underlay created for it. An unknown ID is not an error, so Docker
// can always clean up.
func (d *Driver) DeleteNetwork(ctx context.Context, req *network.DeleteNetworkRequest) error {
	if req.NetworkID == "" {
		return config.Invalidf("DeleteNetwork without NetworkID")
	}
	ctx, unlockNet, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.NetworkKey(req.NetworkID)))
	if err != nil {
		return err
	}
	defer unlockNet()
	n, err := store.ReadNetwork(d.store, req.NetworkID)
	if err != nil || n == nil {
		if n == nil && err == nil {
			d.log.Info("delete of unknown network: nothing to do", "network", req.NetworkID)
		}
		return err
	}
	_, unlockParent, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
	if err != nil {
		return err
	}
	defer unlockParent()
	if err := d.reconcile.RemoveNetwork(ctx, *n); err != nil {
		return fmt.Errorf("delete network %s: %w", dockerid.Short(n.ID), err)
	}
	d.log.Info("deleted network", "network", n.ID, "parent", n.Parent)
	return nil
}

// commitNetwork writes a complete network and confirms the reservations of
// the pools of underlay's IPAM it names: Docker uses them.
func commitNetwork(tx *store.Tx, n record.Network, refs []config.IPAMRef) error {
	for _, r := range refs {
		if err := tx.ConfirmIPAMPools(r.Space, r.Pool); err != nil {
			return err
		}
	}
	return tx.PutNetwork(n)
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// notFound is the error for requests naming an unknown network.
func notFound(what, id string) error {
	return fmt.Errorf("%w: %s %s is unknown to underlay (it was not created through underlay, or underlay's state file was replaced): remove and re-create it with docker network rm/create", pluginapi.ErrNotFound, what, dockerid.Short(id))
}
