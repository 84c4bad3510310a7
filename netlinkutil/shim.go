package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

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
func (k *Kernel) AddShim(ctx context.Context, ep Endpoint, addr netip.Addr) error {
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

// AddHostRoute routes dst (one address) through the link dev; an existing
// route to dst is replaced, and the neighbour entry dev holds for dst is
// flushed: a container started again gets a new endpoint with a new MAC on
// the same address, and the old entry would keep the host talking to the
// old MAC until the kernel gives up on it.
func (k *Kernel) AddHostRoute(ctx context.Context, dst netip.Addr, dev string) error {
	r, err := k.hostRoute(ctx, dst, dev)
	if err != nil {
		return err
	}
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.RouteReplace(r) }); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, dev, err)
	}
	k.flushNeighbour(r.LinkIndex, dst)
	return nil
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
	Link        Link
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
