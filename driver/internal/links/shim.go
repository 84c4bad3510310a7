package links

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Shims makes networks' host links.
type Shims struct {
	Links netlinkutil.Links
	Mark  string // this instance's link mark
	Log   *slog.Logger
	// DeleteOwned deletes a link of this instance (recorded: its record
	// says it is one), telling the repair watcher it is underlay's doing.
	DeleteOwned func(ctx context.Context, name string, recorded bool) error

	mu sync.Mutex
	// warned are the host routes Ensure found held by another link and
	// warned of, with the holder it named: one warning per holder, until
	// the route is underlay's again or its endpoint leaves.
	warned map[heldKey]string
}

type heldKey struct {
	link string
	dst  netip.Addr
}

// host_address: the host reaching its own containers. The kernel passes no
// traffic between a parent and its macvlan/ipvlan children, so the host
// gets a child of its own on the parent (the shim, named ulh + 12
// characters of the network ID) with its address on the network, and a /32
// route to every joined endpoint through it. Both are state: re-made at
// start and by the repair watcher, removed with the network.

// spec is the shim's link: a child of the network's type and mode.
func (h *Shims) spec(n record.Network) kernel.Endpoint {
	return kernel.Endpoint{Name: config.ShimName(n.ID), Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag, MTU: n.MTU, Mark: h.Mark}
}

// Ensure makes the network's host link healthy if it has a host
// address: made when missing (replacing a link of its name that carries no
// mark, and deleting a copy an operator renamed, so a network has one),
// healed when down, without its address or with another MTU; then its
// routes to the joined endpoints, but for a route another link holds,
// which is left to it (a warning, once). The caller holds the parent's
// lock.
func (h *Shims) Ensure(ctx context.Context, n record.Network, routes []netip.Addr) error {
	if n.HostAddress == "" {
		return nil
	}
	addr, perr := netip.ParseAddr(n.HostAddress)
	if perr != nil {
		return fmt.Errorf("%w: network %s has host address %q", store.ErrCorrupt, dockerid.Short(n.ID), n.HostAddress)
	}
	name := config.ShimName(n.ID)
	l, err := h.Links.Get(ctx, name)
	switch {
	case err == nil && l.Name == name && l.Alias == h.Mark:
		if err := h.heal(ctx, n, l, addr); err != nil {
			return err
		}
	case err == nil && l.Name == name && l.Alias != "":
		return fmt.Errorf("%w: the host link %s of network %s carries the mark %q of another underlay instance, not %q: remove that link (ip link del %s) or the other instance's network",
			pluginapi.ErrConflict, name, dockerid.Short(n.ID), l.Alias, h.Mark, name)
	case err == nil && l.Name != name:
		return fmt.Errorf("%w: %s, the host link name of network %s, is an altname of link %s: remove the altname", pluginapi.ErrConflict, name, dockerid.Short(n.ID), l.Name)
	case err == nil || errors.Is(err, netlinkutil.ErrNotFound):
		if err == nil {
			h.Log.Warn("replacing a link of the host link's name that carries no mark (left by a crash while it was made)", "network", n.ID, "link", name)
			if err := h.DeleteOwned(ctx, name, true); err != nil {
				return err
			}
		}
		if err := h.deleteRenamed(ctx, name, addr); err != nil {
			return err
		}
		if err := h.Links.AddShim(ctx, h.spec(n), addr); err != nil {
			return fmt.Errorf("create the host's link %s on %s for network %s: %w", name, n.Parent, dockerid.Short(n.ID), err)
		}
		h.Log.Info("host link ready", "network", n.ID, "link", name, "address", n.HostAddress, "parent", n.Parent)
	default:
		return err
	}
	for _, r := range routes {
		err := h.Links.AddHostRoute(ctx, r, name)
		var held *netlinkutil.RouteHeldError
		switch {
		case errors.As(err, &held):
			h.warnHeld(n, held)
		case err != nil:
			return err
		default:
			h.forget(name, r)
		}
	}
	return nil
}

// Two instances (or an operator) and one address: the host routes an
// address through one link, and underlay never replaces nor deletes a
// route it did not make. A Join whose route another link holds is refused
// (Route); a route Ensure puts back that another link took meanwhile is
// left to it, with a warning.

// warnHeld warns, once per holder, that the route to an endpoint of n is
// held by another link and left to it.
func (h *Shims) warnHeld(n record.Network, held *netlinkutil.RouteHeldError) {
	k := heldKey{held.Dev, held.Dst}
	holder := held.Through()
	h.mu.Lock()
	if h.warned == nil {
		h.warned = map[heldKey]string{}
	}
	seen := h.warned[k] == holder
	h.warned[k] = holder
	h.mu.Unlock()
	if seen {
		return
	}
	through, fix := h.holder(held)
	h.Log.Warn("the host's route to a joined endpoint is held by another link: left alone, so the host does not reach that endpoint through its host link",
		"network", n.ID, "address", held.Dst, "host_link", held.Dev, "holder", through, "fix", fix)
}

// forget ends the warning about a route: underlay's again, or gone.
func (h *Shims) forget(link string, dst netip.Addr) {
	h.mu.Lock()
	delete(h.warned, heldKey{link, dst})
	h.mu.Unlock()
}

// holder names the link (or none) through which the host routes the
// address, whose it is, and how to free the address.
func (h *Shims) holder(held *netlinkutil.RouteHeldError) (holder, fix string) {
	l := held.Holder
	fix = "remove that route (" + held.DelCommand() + ")"
	switch {
	case l.Name == "":
		return held.Through(), fix
	case l.Alias == h.Mark:
		return fmt.Sprintf("link %s, which carries this instance's mark but is not this network's host link", l.Name), fix
	case strings.HasPrefix(l.Alias, kernel.MarkPrefix):
		return fmt.Sprintf("link %s, which carries the mark %q of another underlay instance", l.Name, l.Alias),
			fmt.Sprintf("disconnect the other instance's container with address %s (or remove its network), or %s", held.Dst, fix)
	}
	return held.Through() + ", which carries no underlay mark (an operator's route)", fix
}

// heal puts back what an existing host link lost (up, its address,
// its MTU), logging what was wrong once.
func (h *Shims) heal(ctx context.Context, n record.Network, l kernel.Link, addr netip.Addr) error {
	have, err := h.Links.LinkAddrs(ctx, l.Name)
	if err != nil {
		return err
	}
	why := plan.BrokenBy(l, n.MTU, addr, have)
	if why == "" {
		return nil
	}
	if err := h.Links.Heal(ctx, l.Name, netlinkutil.Heal{MTU: n.MTU, Addr: addr}); err != nil {
		return fmt.Errorf("put the host link %s of network %s back in order (%s): %w", l.Name, dockerid.Short(n.ID), why, err)
	}
	h.Log.Warn("put an owned link back in order", "network", n.ID, "link", l.Name, "was", why)
	return nil
}

// deleteRenamed deletes the links of this instance that an operator
// renamed from a host link name (a macvlan or ipvlan link with the mark,
// neither an endpoint's nor a host link's name, carrying the host
// address), before the host link is made again: one per network.
func (h *Shims) deleteRenamed(ctx context.Context, name string, addr netip.Addr) error {
	links, err := h.Links.List(ctx)
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Alias != h.Mark || !kernel.IsEndpointKind(l.Kind) || config.IsEndpointLinkName(l.Name) || config.IsShimName(l.Name) {
			continue
		}
		as, err := h.Links.LinkAddrs(ctx, l.Name)
		if err != nil || !slices.Contains(as, addr) {
			continue
		}
		h.Log.Warn("deleting a renamed copy of a host link", "link", l.Name, "host_link", name, "address", addr)
		if err := h.DeleteOwned(ctx, l.Name, false); err != nil {
			return err
		}
	}
	return nil
}

// Route adds (or, with del, removes) the host's /32 route to an
// endpoint of a network with a host address. A route to the address that
// another link holds is refused (pluginapi.ErrConflict and
// netlinkutil.ErrRouteHeld, naming the holder and the fix) and left as it
// is; removing deletes only the route through the host link.
func (h *Shims) Route(ctx context.Context, n *record.Network, ep record.Endpoint, del bool) error {
	a, ok := plan.EndpointV4(ep)
	if n == nil || n.HostAddress == "" || !ok {
		return nil
	}
	name := config.ShimName(n.ID)
	if del {
		h.forget(name, a)
		return h.Links.DelHostRoute(ctx, a, name)
	}
	err := h.Links.AddHostRoute(ctx, a, name)
	var held *netlinkutil.RouteHeldError
	if errors.As(err, &held) {
		through, fix := h.holder(held)
		return fmt.Errorf("%w: %w: endpoint %s has address %s, which the host already routes through %s, not through the host link %s of network %s; underlay never takes a route it did not make: %s, or give this container another address (--ip)",
			pluginapi.ErrConflict, netlinkutil.ErrRouteHeld, dockerid.Short(ep.ID), a, through, name, dockerid.Short(n.ID), fix)
	}
	if err == nil {
		h.forget(name, a)
	}
	return err
}

// Healthy reports whether the network's host link exists with this
// instance's mark, up, with its address and MTU.
func (h *Shims) Healthy(ctx context.Context, n record.Network) bool {
	l, err := h.Links.Get(ctx, config.ShimName(n.ID))
	if err != nil || l.Name != config.ShimName(n.ID) || l.Alias != h.Mark {
		return false
	}
	have, err := h.Links.LinkAddrs(ctx, l.Name)
	addr, perr := netip.ParseAddr(n.HostAddress)
	return err == nil && perr == nil && plan.BrokenBy(l, n.MTU, addr, have) == ""
}
