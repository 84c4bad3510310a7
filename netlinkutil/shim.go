package netlinkutil

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's own link on a network (a "shim": a macvlan or ipvlan link of
// the host namespace on the parent, with the host's address), its /32
// routes to the containers, and the link events the repair watcher reads.

// AddShim creates the shim as AddEndpoint does, gives it addr as a host
// address (/32 or /128: no subnet route, so a LAN address the host may
// already have on the parent keeps working) and brings it up. A failed add
// leaves nothing.
func (k *Kernel) AddShim(ctx context.Context, ep kernel.Endpoint, addr netip.Addr) error {
	// Marked last: a link deleted because it could not be set up carries
	// no mark, so its deletion does not wake the repair watcher again.
	mark := ep.Mark
	ep.Mark = ""
	if err := k.AddEndpoint(ctx, ep); err != nil {
		return err
	}
	fail := func(what string, err error) error {
		_ = k.Delete(context.WithoutCancel(ctx), ep.Name)
		return fmt.Errorf("%s shim %s: %w", what, ep.Name, err)
	}
	var l netlink.Link
	err := k.with(func(h *netlink.Handle) (err error) { l, err = h.LinkByName(ep.Name); return err })
	if err != nil {
		return fail("look up", err)
	}
	ip := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}}
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.AddrReplace(l, ip) }); err != nil {
		return fail("address", err)
	}
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetUp(l) }); err != nil {
		return fail("bring up", err)
	}
	if mark != "" {
		if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetAlias(l, mark) }); err != nil {
			return fail("mark", err)
		}
	}
	return nil
}

// ErrRouteHeld is wrapped by AddHostRoute's refusal (a *RouteHeldError):
// the host already routes the address through another link.
var ErrRouteHeld = errors.New("host route held by another link")

// RouteHeldError is AddHostRoute's refusal to take a host route that is
// not its own: the main table routes Dst (one address) through Holder,
// not through Dev. Holder has only Index when the link could not be read;
// a route without a link (blackhole, unreachable, prohibit) has a zero
// Holder and Type naming its kind.
type RouteHeldError struct {
	Dst    netip.Addr
	Dev    string
	Holder kernel.Link
	Type   string // "" for a unicast route
}

// Prefix is the route's destination, dst/32 or dst/128.
func (e *RouteHeldError) Prefix() netip.Prefix { return netip.PrefixFrom(e.Dst, e.Dst.BitLen()) }

// Through says where the route goes: "link NAME" (with its alias), or
// "no link" and the kind of the route.
func (e *RouteHeldError) Through() string {
	switch {
	case e.Holder.Name != "" && e.Holder.Alias != "":
		return fmt.Sprintf("link %s (alias %q)", e.Holder.Name, e.Holder.Alias)
	case e.Holder.Name != "":
		return "link " + e.Holder.Name
	case e.Holder.Index != 0:
		return fmt.Sprintf("link index %d", e.Holder.Index)
	}
	return "no link (a " + cmp.Or(e.Type, "unicast") + " route)"
}

// DelCommand is the ip command that removes the route held.
func (e *RouteHeldError) DelCommand() string {
	switch {
	case e.Holder.Name != "":
		return fmt.Sprintf("ip route del %s dev %s", e.Prefix(), e.Holder.Name)
	case e.Type != "":
		return fmt.Sprintf("ip route del %s %s", e.Type, e.Prefix())
	}
	return fmt.Sprintf("ip route del %s", e.Prefix())
}

func (e *RouteHeldError) Error() string {
	return fmt.Sprintf("%v: the host already routes %s through %s, not through %s: remove that route (%s) or use another address",
		ErrRouteHeld, e.Prefix(), e.Through(), e.Dev, e.DelCommand())
}

func (e *RouteHeldError) Unwrap() error { return ErrRouteHeld }

// AddHostRoute routes dst (one address) through the link dev, unless the
// main table already routes dst (exactly dst/32 or dst/128) elsewhere: a
// route through another link (another instance's host link, an
// operator's) or without one is never replaced but refused with a
// *RouteHeldError; one through dev is kept. The neighbour entry dev holds
// for dst is flushed: a container started again gets a new endpoint with
// a new MAC on the same address, and the old entry would keep the host
// talking to the old MAC until the kernel gives up on it.
//
// Race-safe between processes: the route is added exclusively
// (NLM_F_EXCL), so of two adds of dst with one metric one wins and the
// other, answered EEXIST, looks again and finds the winner.
func (k *Kernel) AddHostRoute(ctx context.Context, dst netip.Addr, dev string) error {
	r, err := k.hostRoute(ctx, dst, dev)
	if err != nil {
		return err
	}
	exhaustive := false
	for {
		held, ok, err := k.mainRoute(ctx, dst, r.LinkIndex, exhaustive)
		if err != nil {
			return fmt.Errorf("route %s via %s: look up the host's route to it: %w", dst, dev, err)
		}
		if ok && routeLink(held) == r.LinkIndex {
			k.flushNeighbour(r.LinkIndex, dst)
			return nil
		}
		if ok {
			return fmt.Errorf("route %s via %s: %w", dst, dev, k.routeHeld(dst, dev, held))
		}
		err = k.retry(ctx, func(h *netlink.Handle) error { return h.RouteAdd(r) })
		if err == nil {
			k.flushNeighbour(r.LinkIndex, dst)
			return nil
		}
		if !errors.Is(err, unix.EEXIST) || exhaustive {
			return fmt.Errorf("route %s via %s: %w", dst, dev, err)
		}
		// Added meanwhile (another instance racing), or a route the
		// lookup passed over: look again, through the whole table.
		exhaustive = true
	}
}

// mainRoute returns the main table's route to exactly dst/32 (dst/128),
// the one through the link index dev if there are several; found is false
// when the table has none. Cost: one FIB lookup (RTM_GETROUTE with
// RTM_F_FIB_MATCH answers the table entry the address matches, without a
// dump), which settles it when the entry is in the main table: the
// longest-prefix match there is dst's own route if it has one. When the
// lookup ends elsewhere (a policy rule, the local table, no route at all)
// or exhaustive is set, the main table is dumped and filtered here (every
// route of the family: the kernel filters no dump by destination).
func (k *Kernel) mainRoute(ctx context.Context, dst netip.Addr, dev int, exhaustive bool) (netlink.Route, bool, error) {
	want := &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(dst.BitLen(), dst.BitLen())}
	if !exhaustive {
		var rs []netlink.Route
		err := k.retry(ctx, func(h *netlink.Handle) (err error) {
			rs, err = h.RouteGetWithOptions(want.IP, &netlink.RouteGetOptions{FIBMatch: true})
			return err
		})
		if err == nil && len(rs) > 0 && rs[0].Table == unix.RT_TABLE_MAIN {
			return rs[0], sameNet(rs[0].Dst, want), nil
		}
	}
	family := netlink.FAMILY_V4
	if dst.Is6() {
		family = netlink.FAMILY_V6
	}
	var rs []netlink.Route
	err := k.retry(ctx, func(h *netlink.Handle) (err error) {
		rs, err = h.RouteListFiltered(family, &netlink.Route{Dst: want, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		return err
	})
	if err != nil || len(rs) == 0 {
		return netlink.Route{}, false, err
	}
	if i := slices.IndexFunc(rs, func(r netlink.Route) bool { return routeLink(r) == dev }); i >= 0 {
		return rs[i], true, nil
	}
	return rs[0], true, nil
}

func sameNet(a, b *net.IPNet) bool {
	return a != nil && a.IP.Equal(b.IP) && slices.Equal(a.Mask, b.Mask)
}

// routeLink is the link a route goes through (its first nexthop's for a
// multipath route), 0 for none.
func routeLink(r netlink.Route) int {
	if r.LinkIndex == 0 && len(r.MultiPath) > 0 {
		return r.MultiPath[0].LinkIndex
	}
	return r.LinkIndex
}

// routeHeld describes the route r to dst that is not dev's.
func (k *Kernel) routeHeld(dst netip.Addr, dev string, r netlink.Route) *RouteHeldError {
	e := &RouteHeldError{Dst: dst, Dev: dev, Type: routeType(r.Type)}
	if idx := routeLink(r); idx != 0 {
		e.Holder = kernel.Link{Index: idx}
		var l netlink.Link
		if err := k.with(func(h *netlink.Handle) (err error) { l, err = h.LinkByIndex(idx); return err }); err == nil {
			e.Holder = convert(l)
		}
	}
	return e
}

// routeType names a route's kind as ip route spells it, "" for unicast.
func routeType(t int) string {
	switch t {
	case unix.RTN_UNICAST:
		return ""
	case unix.RTN_LOCAL:
		return "local"
	case unix.RTN_BROADCAST:
		return "broadcast"
	case unix.RTN_ANYCAST:
		return "anycast"
	case unix.RTN_MULTICAST:
		return "multicast"
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibit"
	case unix.RTN_THROW:
		return "throw"
	}
	return fmt.Sprintf("type %d", t)
}

// flushNeighbour forgets the link's neighbour entry for an address (none
// is fine).
func (k *Kernel) flushNeighbour(index int, a netip.Addr) {
	_ = k.with(func(h *netlink.Handle) error { return h.NeighDel(&netlink.Neigh{LinkIndex: index, IP: a.AsSlice()}) })
}

// DelHostRoute deletes the route to dst through dev; a missing route or
// link is not an error.
func (k *Kernel) DelHostRoute(ctx context.Context, dst netip.Addr, dev string) error {
	r, err := k.hostRoute(ctx, dst, dev)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	err = k.retry(ctx, func(h *netlink.Handle) error { return h.RouteDel(r) })
	k.flushNeighbour(r.LinkIndex, dst)
	if err == nil || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("delete route %s via %s: %w", dst, dev, err)
}

func (k *Kernel) hostRoute(ctx context.Context, dst netip.Addr, dev string) (*netlink.Route, error) {
	idx, err := k.index(ctx, dev)
	if err != nil {
		return nil, err
	}
	return &netlink.Route{
		LinkIndex: idx, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(dst.BitLen(), dst.BitLen())},
	}, nil
}

// LinkEvent is a link appearing, changing or going away, or an address
// removed from a link.
type LinkEvent struct {
	Deleted bool
	// AddrRemoved is set for the removal of an address from Link (whose
	// Name and Index are set, looked up at the event; the other fields are
	// the link's then).
	AddrRemoved bool
	Link        kernel.Link
}

// Subscribe streams the link events of the namespace, and the removals of
// addresses, until ctx ends. The channel is closed when the subscription
// ends (ctx, or a socket error, which is reported through onError).
func (k *Kernel) Subscribe(ctx context.Context, onError func(error)) (<-chan LinkEvent, error) {
	updates := make(chan netlink.LinkUpdate, 256)
	done := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{ErrorCallback: onError, Namespace: &k.ns})
	if err != nil {
		return nil, fmt.Errorf("subscribe to link events: %w", err)
	}
	addrs := make(chan netlink.AddrUpdate, 256)
	addrDone := make(chan struct{})
	err = netlink.AddrSubscribeWithOptions(addrs, addrDone, netlink.AddrSubscribeOptions{ErrorCallback: onError, Namespace: &k.ns})
	if err != nil {
		close(done)
		for range updates {
		}
		return nil, fmt.Errorf("subscribe to address events: %w", err)
	}
	out := make(chan LinkEvent, 256)
	go func() {
		defer close(out)
		defer func() {
			// netlink's receivers may be blocked sending: drain until they
			// see done and close their channels.
			close(done)
			close(addrDone)
			for range updates {
			}
			for range addrs {
			}
		}()
		for {
			var ev LinkEvent
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				ev = LinkEvent{Deleted: u.Header.Type == unix.RTM_DELLINK, Link: convert(u.Link)}
			case a, ok := <-addrs:
				if !ok {
					return
				}
				if a.NewAddr {
					continue
				}
				var l netlink.Link
				if err := k.with(func(h *netlink.Handle) (err error) { l, err = h.LinkByIndex(a.LinkIndex); return err }); err != nil {
					continue // the link itself went away: its own event says so
				}
				ev = LinkEvent{AddrRemoved: true, Link: convert(l)}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
