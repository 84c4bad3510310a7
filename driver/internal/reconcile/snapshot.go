package reconcile

import (
	"context"
	"iter"
	"maps"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The planners' view of the state: one snapshot of the store, and the
// kernel's addresses of the host links.

// Snapshot reads the planners' view of the state in one transaction.
// With links (reconcile and repair), it also reads which of those links
// carrying this instance's mark are endpoint links on record, and the
// networks with a host address: nothing it reads grows with the number of
// endpoints.
func (x *Executor) Snapshot(withEndpoints bool, links ...kernel.Link) (plan.Snapshot, error) {
	s := plan.Snapshot{Owned: map[string]record.ParentLink{}}
	err := x.Store.View(func(tx *store.Tx) error {
		var err error
		if s.Pending, err = tx.Pending(); err != nil {
			return err
		}
		s.Use = tx.ParentUse()
		parents, err := tx.ParentLinks()
		for _, p := range parents {
			s.Owned[p.Name] = p
		}
		if err != nil {
			return err
		}
		if withEndpoints {
			s.EndpointLinks = map[string]bool{}
			for _, l := range links {
				if l.Alias != x.Mark {
					continue
				}
				if _, known, err := tx.EndpointByLink(l.Name); err != nil {
					return err
				} else if known {
					s.EndpointLinks[l.Name] = true
				}
			}
			s.Shims, err = x.readShims(tx)
		}
		return err
	})
	return s, err
}

// readShims lists the networks with a host address and their routes.
func (x *Executor) readShims(tx *store.Tx) (map[string]plan.ShimState, error) {
	out := map[string]plan.ShimState{}
	err := tx.ForEachNetworkWithHostAddress(func(n record.Network) error {
		if n.HostAddress == "" || n.Pending != nil {
			return nil
		}
		routes, err := x.Joins.JoinedV4(tx, n.ID, x.Boot)
		out[config.ShimName(n.ID)] = plan.ShimState{Network: n, Routes: routes}
		return err
	})
	return out, err
}

// ReadShimAddrs reads the kernel's addresses of the host links that exist,
// for the planners (a link gone meanwhile has none).
func (x *Executor) ReadShimAddrs(ctx context.Context, s *plan.Snapshot, links []kernel.Link) {
	s.ShimAddrs = x.HostLinkAddrs(ctx, links, maps.Keys(s.Shims))
}

// HostLinkAddrs reads the addresses of those of the named links that exist
// under that very name (not as another link's altname).
func (x *Executor) HostLinkAddrs(ctx context.Context, links []kernel.Link, names iter.Seq[string]) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for name := range names {
		if l, ok := plan.FindLink(links, name); ok && l.Name == name {
			if as, err := x.Kernel.LinkAddrs(ctx, name); err == nil {
				out[name] = as
			}
		}
	}
	return out
}
