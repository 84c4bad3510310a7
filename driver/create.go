package driver

import (
	"context"
	"fmt"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// creation is one CreateNetwork request on its way through its phases
// (CreateNetwork reads them top to bottom); each phase fills in what the
// next ones need.
type creation struct {
	d     *Driver
	want  record.Network
	refs  []config.IPAMRef
	asked string // the parent as the request named it
	// same is the network recorded under the request's ID, if any.
	same *record.Network
	// res is the parent link the request resolved to; resolved is set when
	// reuseIfSame already resolved it (a network whose parent moved).
	res      plan.Resolution
	resolved bool
	// events is the parent locks' change count before the resolution;
	// parents are the parent locks the request holds.
	events  uint64
	parents []keylock.Req
	// fresh: the resolution is still the kernel's view as far as
	// underlay's own changes go (recheckParent is skipped).
	fresh bool
	dec   plan.Decision
}

// attrs are the request's attributes on each of its log lines (not a
// With logger: it formats them at once, logged or not).
func (c *creation) attrs(kv ...any) []any {
	return append([]any{"network", c.want.ID, "parent", c.asked}, kv...)
}

// newCreation parses the request and refuses a DHCP network this daemon
// cannot lease for.
func newCreation(d *Driver, req *network.CreateNetworkRequest) (*creation, error) {
	want, err := config.ParseNetwork(req)
	if err != nil {
		return nil, err
	}
	if want.Config.DHCP.FromIPAM, want.Config.DHCP.FromIPAM6, err = d.fromDHCPPools(want, req); err != nil {
		return nil, err
	}
	if want.Config.DHCP.Leases() && !d.leases.V4.HasClient() {
		return nil, fmt.Errorf("network %s has dhcp=true, but this daemon was started without a DHCP client", dockerid.Short(want.ID))
	}
	if config.Leases6(want.Config) && !d.leases.V6.HasClient() {
		return nil, fmt.Errorf("network %s has ipv6_mode=dhcpv6, but this daemon was started without a DHCPv6 client", dockerid.Short(want.ID))
	}
	return &creation{d: d, want: want, refs: config.IPAMRefs(req), asked: plan.RequestedParent(want)}, nil
}

// reuseIfSame reuses the recorded network of the same ID and
// configuration whose parent still resolves to the same link (true: the
// request is answered).
func (c *creation) reuseIfSame(ctx context.Context) (bool, error) {
	d := c.d
	same, err := store.ReadNetwork(d.store, c.want.ID)
	if err != nil {
		return false, err
	}
	c.same = same
	if same == nil || same.Pending != nil || !plan.SameConfig(c.want, *same) {
		return false, nil
	}
	r, moving, err := c.parentMoved(ctx)
	if err != nil {
		return false, err
	}
	if moving {
		c.res, c.resolved = r, true
		return false, nil
	}
	_, unlock, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(same.Parent)))
	if err != nil {
		return false, err
	}
	defer unlock()
	d.log.Info("network exists with the same configuration: reusing it", c.attrs("link", same.Parent)...)
	return true, c.reuse(ctx, *same)
}

// resolveParent resolves the requested parent to a kernel link (unless
// reuseIfSame did) and names the network's parent after it.
func (c *creation) resolveParent(ctx context.Context) (err error) {
	d := c.d
	c.events = d.locks.Changes(keylock.Parent)
	if !c.resolved {
		if c.res, err = d.resolver.Resolve(ctx, c.want); err != nil {
			return err
		}
	}
	c.want.Parent = c.res.Name
	if err := c.d.settleDHCPPools(&c.want, c.refs); err != nil {
		return err
	}
	if c.res.Why != "" {
		d.log.Info("parent resolved on this host", c.attrs("link", c.res.Name, "why", c.res.Why)...)
	}
	return nil
}

// lockParents locks the resolved parent and the recorded copy's.
func (c *creation) lockParents(ctx context.Context) (func(), error) {
	d := c.d
	c.parents = []keylock.Req{keylock.Exclusive(keylock.ParentKey(c.want.Parent))}
	if c.same != nil {
		c.parents = append(c.parents, keylock.Exclusive(keylock.ParentKey(c.same.Parent)))
	}
	_, unlock, err := d.locks.Acquire(ctx, c.parents...)
	if err != nil {
		return nil, err
	}
	// Whether the lookup above is still the kernel's view as far as
	// underlay's own changes go (the check at the end).
	c.fresh = c.same == nil && d.locks.Quiet(keylock.Parent, c.events, len(keylock.Merge(c.parents)))
	return unlock, nil
}

// decide decides over the networks recorded on the parent.
func (c *creation) decide() error {
	d := c.d
	var onParent []record.Network
	if err := d.store.View(func(tx *store.Tx) (err error) {
		onParent, err = tx.NetworksOn(c.want.Parent)
		return err
	}); err != nil {
		return err
	}
	c.dec = plan.Decide(c.want, c.same, onParent)
	c.fresh = c.fresh && len(c.dec.Conflicts) == 0
	d.log.Debug("create network decision", c.attrs("link", c.want.Parent, "verdict", c.dec.Verdict.String(), "conflicts", len(c.dec.Conflicts))...)
	return nil
}

// clearTheWay rules out the conflicting holders (stale ones are removed,
// live ones refuse the request) and removes a stale copy of the network
// being replaced or moved. answered: a move the new link refused left the
// network on its old link (or the refusal stands), nothing more to do.
// release unlocks the holders checked; call it once the request is
// answered, also on an error.
func (c *creation) clearTheWay(ctx context.Context) (release func(), answered bool, err error) {
	d, want, same, dec := c.d, c.want, c.same, &c.dec
	var releases []func()
	release = func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	if dec.Verdict == plan.VerdictMove && len(dec.Conflicts) > 0 {
		// A move the new link's rules refuse must not cost the network
		// its working copy: rule out stale holders before anything goes.
		r, err := d.holders.Clear(ctx, want, c.asked, dec.Conflicts)
		releases = append(releases, r)
		if err != nil {
			return release, true, d.holders.Refused(c.stayPut(ctx, want.Parent, err))
		}
		dec.Conflicts = nil
	}
	switch dec.Verdict {
	case plan.VerdictReuse: // the reuse path answered this; a pending same is not reused
	case plan.VerdictReplace, plan.VerdictMove:
		if dec.Verdict == plan.VerdictMove {
			d.log.Info("the parent option now resolves to another link on this host: moving the network there (its endpoints' links of earlier sandboxes go with the old copy)",
				c.attrs("old_link", same.Parent, "link", want.Parent, "why", c.res.Why)...)
		} else {
			d.log.Warn("replacing stale duplicate of network (same ID, other configuration)",
				c.attrs("old_parent", same.Parent, "old", plan.Describe(*same), "new", plan.Describe(want))...)
		}
		d.point("create-network/before-remove-stale")
		if err := d.reconcile.RemoveNetwork(ctx, *same); err != nil {
			return release, false, fmt.Errorf("remove the stale copy of network %s: %w", dockerid.Short(want.ID), err)
		}
		d.point("create-network/after-remove-stale")
	}
	if len(dec.Conflicts) > 0 {
		r, err := d.holders.Clear(ctx, want, c.asked, dec.Conflicts)
		releases = append(releases, r)
		if err != nil {
			return release, false, d.holders.Refused(err)
		}
	}
	return release, false, nil
}

// recheckParent looks at the parent link again unless the resolution is
// fresh. The link may have come or gone while this request waited for
// its lock (a delete releasing it, the janitor, someone else), and
// removing stale networks may have released it: look again, now that no
// one else can create or delete it under this name. Skipped when no
// parent lock changed hands since the lookup and nothing was removed:
// then underlay changed no parent link in between. A link someone outside
// underlay deletes in that window (microseconds when the lock was free) is
// found as at any later time: the next Join re-creates a parent underlay
// owns, or fails naming it.
func (c *creation) recheckParent(ctx context.Context) (err error) {
	if c.fresh {
		return nil
	}
	if c.res, err = c.d.resolver.Resolve(ctx, c.want); err != nil {
		return err
	}
	if c.res.Name != c.want.Parent {
		return fmt.Errorf("%w: parent %s became link %s while this request waited for it (someone created it meanwhile): retry", pluginapi.ErrConflict, c.asked, c.res.Name)
	}
	return nil
}
