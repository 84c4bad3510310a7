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

// OwnAddr reports whether addr is one of the host's own addresses: the
// kernel's local table delivers it to the host, which is what Linux
// answers ARP and Neighbour Solicitation for on its links (and never its
// own outgoing probe, so a probe cannot find it). link names a link that
// carries the address ("" when only a local route holds it, as AnyIP's
// `ip route add local ...`). A link-local IPv6 address is looked up on the
// link with index scope (its parent). Its cost does not grow with the
// host: one route lookup; the addresses are listed only when it is the
// host's, to name the link.
func (k *Kernel) OwnAddr(ctx context.Context, addr netip.Addr, scope int) (link string, own bool, err error) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() {
		return "", false, nil
	}
	opts := &netlink.RouteGetOptions{}
	if addr.Is6() && addr.IsLinkLocalUnicast() {
		opts.OifIndex = scope
	}
	var rs []netlink.Route
	err = k.retry(ctx, func(h *netlink.Handle) (err error) {
		rs, err = h.RouteGetWithOptions(net.IP(addr.AsSlice()), opts)
		return err
	})
	if err != nil {
		// A destination the kernel does not route to the host is no local
		// one: no route at all (ENETUNREACH, EHOSTUNREACH, ENODEV for a
		// scope gone), or a prohibit (EACCES) or blackhole (EINVAL) route,
		// as Calico's for its address blocks.
		if isNoRoute(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("look up the route to %s: %w", addr, err)
	}
	for _, r := range rs {
		if r.Type == unix.RTN_LOCAL {
			own = true
		}
	}
	if !own {
		return "", false, nil
	}
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	// Name the link that carries it, the scope's first.
	_ = k.retry(ctx, func(h *netlink.Handle) error {
		as, err := h.AddrList(nil, family)
		if err != nil {
			return err
		}
		index := 0
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr && (index == 0 || a.LinkIndex == scope) {
				index = a.LinkIndex
			}
		}
		if index == 0 {
			return nil
		}
		l, err := h.LinkByIndex(index)
		if err == nil {
			link = l.Attrs().Name
		}
		return nil
	})
	return link, true, nil // a failure to name the link changes nothing: it is the host's
}

// isNoRoute reports whether a route lookup failed for want of a route to
// the host: none, or one that refuses (prohibit, blackhole).
func isNoRoute(err error) bool {
	for _, e := range []error{unix.ENETUNREACH, unix.EHOSTUNREACH, unix.ENODEV, unix.ENETDOWN, unix.EACCES, unix.EINVAL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
