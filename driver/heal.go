package driver

import (
	"context"
	"iter"
	"maps"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/owned"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Carrying out health.go's steps: healing owned links that exist but are
// broken, and following a renamed owned VLAN (driver/internal/owned).

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
		return d.owned.Follow(ctx, s.Name, s.To, held)
	case s.Shim.Network.ID != "":
		return d.repairShim(ctx, s, held) // hostlink.Shims.Ensure logs what it healed
	default:
		unlock, err := d.owned.TryParent(s.Name, held)
		if err != nil {
			return err
		}
		defer unlock()
		var p store.ParentLink
		var still bool
		if err := d.store.View(func(tx *store.Tx) (err error) {
			p, still, err = tx.ParentLink(s.Name)
			still = still && owned.Needed(tx, s.Name)
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
