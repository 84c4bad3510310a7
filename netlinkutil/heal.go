package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// Links that exist but are broken: an operator set one down, flushed its
// address or lowered its MTU. Heal puts back what underlay gave the link.

// Heal is what a link must have besides existing.
type Heal struct {
	// MTU is set when non-zero and different from the link's.
	MTU int
	// Addr is added as a host address (/32 or /128) when valid and missing.
	Addr netip.Addr
}

// LinkAddrs implements Links.
func (k *Kernel) LinkAddrs(ctx context.Context, name string) ([]netip.Addr, error) {
	var as []netlink.Addr
	err := k.retry(ctx, func(h *netlink.Handle) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		as, err = h.AddrList(l, netlink.FAMILY_ALL)
		return err
	})
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("list the addresses of %s: %w", name, err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// Heal implements Links. It sets the link up and puts the address back
// before it tries the MTU, so that a refused MTU (the parent's is lower
// now) does not keep the other repairs from being made; the failures are
// joined.
func (k *Kernel) Heal(ctx context.Context, name string, want Heal) error {
	var l netlink.Link
	err := k.retry(ctx, func(h *netlink.Handle) (err error) { l, err = h.LinkByName(name); return err })
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return fmt.Errorf("heal link %s: %w: %s", name, ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("heal link %s: %w", name, err)
	}
	var errs []error
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetUp(l) }); err != nil {
			errs = append(errs, fmt.Errorf("bring %s back up: %w", name, err))
		}
	}
	if want.Addr.IsValid() {
		have, err := k.LinkAddrs(ctx, name)
		if err != nil {
			errs = append(errs, err)
		} else if !slices.Contains(have, want.Addr) {
			bits := want.Addr.BitLen()
			ip := &netlink.Addr{IPNet: &net.IPNet{IP: want.Addr.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
			if err := k.retry(ctx, func(h *netlink.Handle) error { return h.AddrReplace(l, ip) }); err != nil {
				errs = append(errs, fmt.Errorf("put address %s back on %s: %w", want.Addr, name, err))
			}
		}
	}
	if want.MTU > 0 && l.Attrs().MTU != want.MTU {
		if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetMTU(l, want.MTU) }); err != nil {
			errs = append(errs, fmt.Errorf("set the MTU of %s back to %d (is its parent's MTU lower now?): %w", name, want.MTU, err))
		}
	}
	return errors.Join(errs...)
}
