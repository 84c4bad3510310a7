// Package nltest provides an in-memory kernel implementing
// netlinkutil.Links, with the kernel's rules that matter to underlay: unique
// names of at most 15 bytes, a parent carries macvlan or ipvlan links but
// never both (EBUSY), macvlan passthru is exclusive, all ipvlan links on one
// parent share the port mode and flags of the newest one (as the kernel
// silently does), a macvlan or ipvlan made on a macvlan lands on its lower
// link, a base carries one VLAN of an ID (EEXIST), names and altnames are
// looked up alike, and deleting a link deletes the links stacked on it.
// Its events are the kernel's too: a link made on another, or deleted from
// it, announces that lower link again, unchanged (NETDEV_CHANGEUPPER).
package nltest

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"golang.org/x/sys/unix"
)

// Kernel is a fake kernel. The zero value is not usable; call New.
type Kernel struct {
	mu    sync.Mutex
	links map[string]*kernel.Link
	next  int
	fault func(op, name string) error
	calls map[string]int
	// addrs are the host addresses of shims, by link name; routes the
	// host routes, destination -> link name ("" for a route through no
	// link, as a blackhole route).
	addrs  map[string][]netip.Addr
	routes map[netip.Addr]string
	subs   []chan netlinkutil.LinkEvent
	// blocked are the addresses Block blocked.
	blocked []netlinkutil.Blocked
}

// New returns a kernel holding only lo.
func New() *Kernel {
	k := &Kernel{links: map[string]*kernel.Link{}, next: 1, calls: map[string]int{},
		addrs: map[string][]netip.Addr{}, routes: map[netip.Addr]string{}}
	k.put(kernel.Link{Name: "lo", Kind: "device", MTU: 65536})
	return k
}

func (k *Kernel) put(l kernel.Link) {
	l.Index = k.next
	k.next++
	k.links[l.Name] = &l
	k.emit(netlinkutil.LinkEvent{Link: l})
	k.announceLower(l)
}

// announceLower emits the event of the link l stands on, unchanged, as the
// kernel does when a link is stacked on it or taken off it.
func (k *Kernel) announceLower(l kernel.Link) {
	if l.ParentIndex == 0 {
		return
	}
	if lower := k.byIndex(l.ParentIndex); lower != nil {
		k.emit(netlinkutil.LinkEvent{Link: *lower})
	}
}

// emit sends an event to every subscriber without blocking (a full
// subscriber misses it, as a real socket's overrun would).
func (k *Kernel) emit(ev netlinkutil.LinkEvent) {
	for _, c := range k.subs {
		select {
		case c <- ev:
		default:
		}
	}
}

// AddHostLink adds a link as if the administrator had made it (a NIC, a
// bridge, a veth...), with the given kind and MTU.
func (k *Kernel) AddHostLink(name, kind string, mtu int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.put(kernel.Link{Name: name, Kind: kind, MTU: mtu})
}

// SetWireless makes a link an 802.11 (Wi-Fi) device, as a wireless NIC's
// driver does (the host's test kernel has none). As in netlinkutil, Get
// shows it (Wireless), List, LinkByIndex and LinksOn do not.
func (k *Kernel) SetWireless(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.lookup(name); l != nil {
		l.Wireless = true
	}
}

// listed is a link as a dump shows it: without Wireless, which only Get
// reads (from sysfs).
func listed(l kernel.Link) kernel.Link {
	l.Wireless = false
	return l
}

// AddAltName gives a link an alternative name, as `ip link property add`.
func (k *Kernel) AddAltName(name, alt string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.lookup(name); l != nil {
		l.AltNames = append(l.AltNames, alt)
	}
}

// AddLink adds a link as given (Index is assigned), as if someone else had
// created it: a user's VLAN, a link another underlay instance marked.
func (k *Kernel) AddLink(l kernel.Link) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.put(l)
}

// lookup finds a link by name or altname.
func (k *Kernel) lookup(name string) *kernel.Link {
	if l, ok := k.links[name]; ok {
		return l
	}
	for _, l := range k.links {
		if l.HasName(name) {
			return l
		}
	}
	return nil
}

// SetFault installs a hook called before every operation with the operation
// ("get", "list", "vlan", "dummy", "endpoint", "delete") and link name; a
// non-nil error fails the operation. The hook may block to emulate a stuck
// kernel call. Pass nil to remove it.
func (k *Kernel) SetFault(f func(op, name string) error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fault = f
}

// Calls returns how many times op was called.
func (k *Kernel) Calls(op string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls[op]
}

// Names returns the names of all links, sorted.
func (k *Kernel) Names() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n := range k.links {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Remove deletes a link behind underlay's back (a reboot, an administrator).
func (k *Kernel) Remove(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.remove(name)
}

func (k *Kernel) begin(op, name string) error {
	k.mu.Lock()
	k.calls[op]++
	f := k.fault
	k.mu.Unlock()
	if f != nil {
		return f(op, name)
	}
	return nil
}

func (k *Kernel) byIndex(i int) *kernel.Link {
	for _, l := range k.links {
		if l.Index == i {
			return l
		}
	}
	return nil
}

func (k *Kernel) children(parent *kernel.Link) []*kernel.Link {
	var out []*kernel.Link
	for _, l := range k.links {
		if l.ParentIndex == parent.Index && l.ParentIndex != 0 {
			out = append(out, l)
		}
	}
	return out
}

func (k *Kernel) remove(name string) {
	l, ok := k.links[name]
	if !ok {
		return
	}
	for _, c := range k.children(l) {
		k.remove(c.Name)
	}
	delete(k.links, name)
	delete(k.addrs, name)
	for dst, dev := range k.routes {
		if dev == name {
			delete(k.routes, dst)
		}
	}
	k.emit(netlinkutil.LinkEvent{Deleted: true, Link: *l})
	k.announceLower(*l)
}

func (k *Kernel) checkNew(name string) error {
	if len(name) > kernel.MaxNameLen || name == "" {
		return fmt.Errorf("name %q: %w", name, unix.EINVAL)
	}
	if k.lookup(name) != nil {
		return fmt.Errorf("link %s: %w", name, unix.EEXIST)
	}
	return nil
}

// Get implements netlinkutil.Links.
func (k *Kernel) Get(_ context.Context, name string) (kernel.Link, error) {
	if err := k.begin("get", name); err != nil {
		return kernel.Link{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lookup(name)
	if l == nil {
		return kernel.Link{}, fmt.Errorf("%w: %s", netlinkutil.ErrNotFound, name)
	}
	return *l, nil
}

// List implements netlinkutil.Links.
func (k *Kernel) List(_ context.Context) ([]kernel.Link, error) {
	if err := k.begin("list", ""); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]kernel.Link, 0, len(k.links))
	for _, l := range k.links {
		out = append(out, listed(*l))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// LinkByIndex implements netlinkutil.Links.
func (k *Kernel) LinkByIndex(_ context.Context, index int) (kernel.Link, error) {
	if err := k.begin("get", ""); err != nil {
		return kernel.Link{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.byIndex(index)
	if l == nil {
		return kernel.Link{}, fmt.Errorf("%w: index %d", netlinkutil.ErrNotFound, index)
	}
	return netlinkutil.Unannounced(listed(*l)), nil
}

// LinkByName implements netlinkutil.Links.
func (k *Kernel) LinkByName(ctx context.Context, name string) (kernel.Link, error) {
	l, err := k.Get(ctx, name)
	if err != nil {
		return kernel.Link{}, err
	}
	return netlinkutil.Unannounced(listed(l)), nil // listed: no Wireless
}

// LinksOn implements netlinkutil.Links.
func (k *Kernel) LinksOn(_ context.Context, parent int) ([]kernel.Link, error) {
	if err := k.begin("list", ""); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []kernel.Link
	for _, l := range k.children(&kernel.Link{Index: parent}) {
		if l.Index != parent {
			out = append(out, netlinkutil.Unannounced(listed(*l)))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// AddVLAN implements netlinkutil.Links.
func (k *Kernel) AddVLAN(_ context.Context, name, base string, id, mtu int, mark string) error {
	if err := k.begin("vlan", name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.checkNew(name); err != nil {
		return err
	}
	b := k.lookup(base)
	if b == nil {
		return fmt.Errorf("create VLAN link %s: base link: %w: %s", name, netlinkutil.ErrNotFound, base)
	}
	if id < 1 || id > 4094 {
		return fmt.Errorf("vlan id %d: %w", id, unix.ERANGE)
	}
	for _, c := range k.children(b) {
		if c.Kind == "vlan" && c.VLAN == id {
			return fmt.Errorf("vlan %d on %s: %w", id, base, unix.EEXIST)
		}
	}
	if mtu == 0 {
		mtu = b.MTU
	}
	k.put(kernel.Link{Name: name, Kind: kernel.KindVLAN, ParentIndex: b.Index, VLAN: id, MTU: mtu, Alias: mark})
	return nil
}

// AddDummy implements netlinkutil.Links.
func (k *Kernel) AddDummy(_ context.Context, name string, mtu int, mark string) error {
	if err := k.begin("dummy", name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.checkNew(name); err != nil {
		return err
	}
	if mtu == 0 {
		mtu = 1500
	}
	k.put(kernel.Link{Name: name, Kind: kernel.KindDummy, MTU: mtu, Alias: mark})
	return nil
}

// AddEndpoint implements netlinkutil.Links.
func (k *Kernel) AddEndpoint(_ context.Context, ep kernel.Endpoint) error {
	if err := k.begin("endpoint", ep.Name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.checkNew(ep.Name); err != nil {
		return err
	}
	p := k.lookup(ep.Parent)
	if p == nil {
		return fmt.Errorf("create %s link %s: parent: %w: %s", ep.Type, ep.Name, netlinkutil.ErrNotFound, ep.Parent)
	}
	if p.Kind == kernel.KindMacvlan && p.ParentIndex != 0 {
		if lower := k.byIndex(p.ParentIndex); lower != nil {
			p = lower // the kernel puts links made on a macvlan on its lower link
		}
	}
	if ep.MTU > p.MTU {
		return fmt.Errorf("mtu %d above parent's %d: %w", ep.MTU, p.MTU, unix.EINVAL)
	}
	for _, c := range k.children(p) {
		switch {
		case kernel.IsEndpointKind(c.Kind) && c.Kind != ep.Type:
			return fmt.Errorf("%s on %s holding %s: %w", ep.Type, ep.Parent, c.Kind, unix.EBUSY)
		case ep.MAC != "" && c.MAC == ep.MAC:
			return fmt.Errorf("MAC %s on %s: %w", ep.MAC, ep.Parent, unix.EADDRINUSE)
		case ep.Type == kernel.KindMacvlan && c.Kind == kernel.KindMacvlan && (c.Mode == kernel.MacvlanPassthru || ep.Mode == kernel.MacvlanPassthru):
			return fmt.Errorf("passthru on %s: %w", ep.Parent, unix.EBUSY)
		}
	}
	mtu := ep.MTU
	if mtu == 0 {
		mtu = p.MTU
	}
	l := kernel.Link{Name: ep.Name, Kind: ep.Type, ParentIndex: p.Index, MTU: mtu, Mode: ep.Mode, Flag: ep.Flag, MAC: ep.MAC, Alias: ep.Mark, Down: true}
	if ep.Type == kernel.KindIpvlan {
		// The port mode and flags belong to the parent: the newest link's
		// settings silently apply to all of them.
		for _, c := range k.children(p) {
			if c.Kind == kernel.KindIpvlan {
				c.Mode, c.Flag = ep.Mode, ep.Flag
			}
		}
	}
	k.put(l)
	return nil
}

// Delete implements netlinkutil.Links.
func (k *Kernel) Delete(_ context.Context, name string) error {
	if err := k.begin("delete", name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.remove(name)
	return nil
}

// DeleteLink implements netlinkutil.Links: the link of that name, if it is
// still the one with that index.
func (k *Kernel) DeleteLink(_ context.Context, l kernel.Link) error {
	if err := k.begin("delete", l.Name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur, ok := k.links[l.Name]; ok && cur.Index == l.Index {
		k.remove(l.Name)
	}
	return nil
}

// Link returns the named link, or false.
func (k *Kernel) Link(name string) (kernel.Link, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.links[name]
	if !ok {
		return kernel.Link{}, false
	}
	return *l, true
}

// Parent returns the name of a link's lower link, or "".
func (k *Kernel) Parent(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.links[name]
	if !ok || l.ParentIndex == 0 {
		return ""
	}
	if p := k.byIndex(l.ParentIndex); p != nil {
		return p.Name
	}
	return ""
}

// AddShim implements netlinkutil.Links.
func (k *Kernel) AddShim(ctx context.Context, ep kernel.Endpoint, addr netip.Addr) error {
	if err := k.AddEndpoint(ctx, ep); err != nil {
		return err
	}
	if err := k.begin("shim", ep.Name); err != nil {
		_ = k.Delete(ctx, ep.Name)
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[ep.Name] = append(k.addrs[ep.Name], addr)
	k.links[ep.Name].Down = false
	return nil
}

// AddHostRoute implements netlinkutil.Links: a route to dst through
// another link, or through none, is refused as the real kernel's is (a
// *netlinkutil.RouteHeldError naming the holder), and one through dev
// kept.
func (k *Kernel) AddHostRoute(_ context.Context, dst netip.Addr, dev string) error {
	if err := k.begin("route", dev); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.links[dev]; !ok {
		return fmt.Errorf("route %s: %w: %s", dst, netlinkutil.ErrNotFound, dev)
	}
	if holder, ok := k.routes[dst]; ok && holder != dev {
		e := &netlinkutil.RouteHeldError{Dst: dst, Dev: dev, Type: "blackhole"}
		if l, ok := k.links[holder]; ok {
			e.Holder, e.Type = *l, ""
		}
		return fmt.Errorf("route %s via %s: %w", dst, dev, e)
	}
	k.routes[dst] = dev
	return nil
}

// HoldRoute adds a route to dst through the link named, as someone else
// would (an operator, another underlay instance); "" is a blackhole route.
// It replaces a route to dst, as ip route replace does.
func (k *Kernel) HoldRoute(dst netip.Addr, link string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.routes[dst] = link
}

// DelHostRoute implements netlinkutil.Links.
func (k *Kernel) DelHostRoute(_ context.Context, dst netip.Addr, dev string) error {
	if err := k.begin("route-delete", dev); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.routes[dst] == dev {
		delete(k.routes, dst)
	}
	return nil
}

// Subscribe implements netlinkutil.Links.
func (k *Kernel) Subscribe(ctx context.Context, _ func(error)) (<-chan netlinkutil.LinkEvent, error) {
	c := make(chan netlinkutil.LinkEvent, 256)
	k.mu.Lock()
	k.subs = append(k.subs, c)
	k.mu.Unlock()
	out := make(chan netlinkutil.LinkEvent)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-c:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Addrs returns a link's host addresses.
func (k *Kernel) Addrs(name string) []netip.Addr {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]netip.Addr(nil), k.addrs[name]...)
}

// Routes returns the host routes, destination -> link name.
func (k *Kernel) Routes() map[netip.Addr]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[netip.Addr]string, len(k.routes))
	for d, l := range k.routes {
		out[d] = l
	}
	return out
}
