package nltest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/underlay-net/underlay/netlinkutil"
)

// What an operator does to links that exist (set down, flush, rename,
// lower the MTU), and Heal, which undoes it.

// SetDown sets a link down (or up), as `ip link set dev NAME down`.
func (k *Kernel) SetDown(name string, down bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.links[name]; ok {
		l.Down = down
		k.emit(netlinkutil.LinkEvent{Link: *l})
	}
}

// FlushAddrs removes a link's addresses, as `ip addr flush dev NAME`.
func (k *Kernel) FlushAddrs(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.links[name]; ok && len(k.addrs[name]) > 0 {
		delete(k.addrs, name)
		k.emit(netlinkutil.LinkEvent{AddrRemoved: true, Link: *l})
	}
}

// Rename renames a link, as `ip link set dev OLD name NEW`; its addresses
// and routes go with it.
func (k *Kernel) Rename(old, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.links[old]
	if !ok {
		return fmt.Errorf("rename %s: %w: %s", old, netlinkutil.ErrNotFound, old)
	}
	if err := k.checkNew(name); err != nil {
		return err
	}
	delete(k.links, old)
	l.Name = name
	k.links[name] = l
	if a, ok := k.addrs[old]; ok {
		delete(k.addrs, old)
		k.addrs[name] = a
	}
	for dst, dev := range k.routes {
		if dev == old {
			k.routes[dst] = name
		}
	}
	k.emit(netlinkutil.LinkEvent{Link: *l})
	return nil
}

// SetMTU changes a link's MTU, as `ip link set dev NAME mtu N`.
func (k *Kernel) SetMTU(name string, mtu int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l, ok := k.links[name]; ok {
		l.MTU = mtu
		k.emit(netlinkutil.LinkEvent{Link: *l})
	}
}

// LinkAddrs implements netlinkutil.Links.
func (k *Kernel) LinkAddrs(_ context.Context, name string) ([]netip.Addr, error) {
	if err := k.begin("addrs", name); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lookup(name)
	if l == nil {
		return nil, fmt.Errorf("%w: %s", netlinkutil.ErrNotFound, name)
	}
	return append([]netip.Addr(nil), k.addrs[l.Name]...), nil
}

// Heal implements netlinkutil.Links.
func (k *Kernel) Heal(_ context.Context, name string, h netlinkutil.Heal) error {
	if err := k.begin("heal", name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lookup(name)
	if l == nil {
		return fmt.Errorf("heal link %s: %w: %s", name, netlinkutil.ErrNotFound, name)
	}
	if h.MTU > 0 {
		l.MTU = h.MTU
	}
	if h.Addr.IsValid() && !slices.Contains(k.addrs[l.Name], h.Addr) {
		k.addrs[l.Name] = append(k.addrs[l.Name], h.Addr)
	}
	l.Down = false
	return nil
}

// Block implements the leases' AddrBlocker in memory.
func (k *Kernel) Block(_ context.Context, parent string, addr netip.Addr, tag string) error {
	if err := k.begin("block", parent); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	b := netlinkutil.Blocked{Parent: parent, Addr: addr, Tag: tag}
	if !slices.Contains(k.blocked, b) {
		k.blocked = append(k.blocked, b)
	}
	return nil
}

// Unblock implements the leases' AddrBlocker in memory.
func (k *Kernel) Unblock(_ context.Context, parent string, addr netip.Addr, tag string) error {
	if err := k.begin("unblock", parent); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.blocked = slices.DeleteFunc(k.blocked, func(b netlinkutil.Blocked) bool {
		return b.Addr == addr && b.Tag == tag // every parent's, as the kernel's Unblock
	})
	return nil
}

// MoveBlocks implements netlinkutil.Kernel's MoveBlocks in memory: tag's
// blocks on from are on to afterwards.
func (k *Kernel) MoveBlocks(_ context.Context, from, to, tag string) ([]netip.Addr, error) {
	if err := k.begin("move-blocks", from); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var moved []netip.Addr
	var out []netlinkutil.Blocked
	for _, b := range k.blocked {
		if b.Parent == from && b.Tag == tag && from != to {
			b.Parent = to
			if slices.Contains(k.blocked, b) {
				continue
			}
			moved = append(moved, b.Addr)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	k.blocked = out
	return moved, nil
}

// BlockedAddrs implements the leases' AddrBlocker in memory.
func (k *Kernel) BlockedAddrs(_ context.Context, tag string) ([]netlinkutil.Blocked, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []netlinkutil.Blocked
	for _, b := range k.blocked {
		if b.Tag == tag {
			out = append(out, b)
		}
	}
	return out, nil
}
