package driver

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Carrying out health.go's steps: healing owned links that exist but are
// broken, and following a renamed owned VLAN.

// readShimAddrs reads the kernel's addresses of the host links that exist,
// for the planners (a link gone meanwhile has none).
func (d *Driver) readShimAddrs(ctx context.Context, s *rules.Snapshot, links []netlinkutil.Link) {
	s.ShimAddrs = d.hostLinkAddrs(ctx, links, maps.Keys(s.Shims))
}

// hostLinkAddrs reads the addresses of those of the named links that exist
// under that very name (not as another link's altname).
func (d *Driver) hostLinkAddrs(ctx context.Context, links []netlinkutil.Link, names iter.Seq[string]) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for name := range names {
		if l, ok := rules.FindLink(links, name); ok && l.Name == name {
			if as, err := d.links.LinkAddrs(ctx, name); err == nil {
				out[name] = as
			}
		}
	}
	return out
}

// heal carries out opHeal (an owned parent or a host link) and opFollow,
// under the locks of the links involved (tried unless held).
func (d *Driver) heal(ctx context.Context, s rules.Step, held string) error {
	switch {
	case s.Op == rules.OpFollow:
		return d.follow(ctx, s.Name, s.To, held)
	case s.Shim.Network.ID != "":
		return d.repairShim(ctx, s, held) // hostlink.Shims.Ensure logs what it healed
	default:
		unlock, err := d.tryParent(s.Name, held)
		if err != nil {
			return err
		}
		defer unlock()
		var p store.ParentLink
		var still bool
		if err := d.store.View(func(tx *store.Tx) (err error) {
			p, still, err = tx.ParentLink(s.Name)
			still = still && parentNeeded(tx, s.Name)
			return err
		}); err != nil || !still {
			return err
		}
		if err := d.links.Heal(ctx, s.Name, netlinkutil.Heal{MTU: p.MTU}); err != nil {
			return err
		}
	}
	d.log.Warn("put an owned link back in order", "link", s.Name, "was", s.Why)
	return nil
}

// follow moves the record of the owned VLAN from (renamed by an operator)
// to the link's name to, with the networks recorded on it and the owned
// VLANs standing on it, under both links' locks.
func (d *Driver) follow(ctx context.Context, from, to, held string) error {
	unlockFrom, err := d.tryParent(from, held)
	if err != nil {
		return err
	}
	defer unlockFrom()
	unlockTo, err := d.tryParent(to, held)
	if err != nil {
		return err
	}
	defer unlockTo()
	l, err := d.links.Get(ctx, to)
	if err != nil || l.Name != to || l.Alias != d.mark {
		return err // changed again meanwhile: the next pass sees it
	}
	err = d.store.Update(func(tx *store.Tx) error {
		p, ok, err := tx.ParentLink(from)
		if err != nil || !ok || p.Kind != rules.KindVLAN || p.VLAN != l.VLAN {
			return err
		}
		if _, taken, err := tx.ParentLink(to); err != nil || taken {
			return err
		}
		for _, up := range tx.ParentLinksOn(from) {
			u, ok, err := tx.ParentLink(up)
			if err != nil {
				return err
			}
			if ok {
				u.Base = to
				if err := tx.PutParentLink(u); err != nil {
					return err
				}
			}
		}
		if err := tx.DeleteParentLink(from); err != nil {
			return err
		}
		p.Name = to
		if err := tx.PutParentLink(p); err != nil {
			return err
		}
		return repointTx(tx, from, to)
	})
	if err != nil {
		return fmt.Errorf("follow VLAN %s renamed to %s: %w", from, to, err)
	}
	d.log.Warn("an owned VLAN was renamed: its record and networks follow it", "from", from, "to", to)
	return nil
}
