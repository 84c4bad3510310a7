package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A container's network namespace (libnetwork's sandbox) is named by a
// path, the Join's SandboxKey, and is the same namespace only while that
// path opens the same nsfs inode: a path that now opens another inode (or
// none) is no longer the container's, and nothing is done there.
// Reading a namespace's links and setting addresses in it open a netlink
// socket inside it (setns: CAP_SYS_ADMIN); the link itself is made by the
// host namespace's socket straight into it (IFLA_NET_NS_FD).

// ErrSandboxGone is wrapped when a sandbox's path no longer opens the
// namespace it named (the container stopped, or another took the path).
var ErrSandboxGone = errors.New("the container's network namespace is gone")

// ErrIfNameTaken is wrapped when the container already has a link of the
// name an interface is to be re-made with.
var ErrIfNameTaken = errors.New("the container already has a link of that name")

// SandboxID identifies a namespace: its nsfs device and inode.
type SandboxID struct{ Dev, Ino uint64 }

// SandboxLink is an endpoint's interface as it is in its container.
type SandboxLink struct {
	Name string
	// ParentIndex is its lower link's index in the host namespace.
	ParentIndex int
	MTU         int
	MAC         string
	Up          bool
	// Default4 and Default6 say the namespace's default route of that
	// family goes through it.
	Default4, Default6 bool
}

// Replumb is an endpoint's interface to make again in its container:
// Link (Name is the container's name for it, Parent the host's link),
// its addresses, gateways and routes.
type Replumb struct {
	Path    string
	Sandbox SandboxID
	Link    kernel.Endpoint
	Addrs   []netip.Prefix
	// IPv6 turns IPv6 on for the link: namespaces whose default has it
	// off (engine 20.10's) would refuse its IPv6 addresses and SLAAC.
	IPv6     bool
	Gateways []netip.Addr
	Routes   []SandboxRoute
}

// SandboxRoute is a route of the interface: Via invalid is on-link.
type SandboxRoute struct {
	Dst netip.Prefix
	Via netip.Addr
}

// openSandbox opens the namespace at path and identifies it.
func openSandbox(path string) (netns.NsHandle, SandboxID, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return netns.None(), SandboxID{}, fmt.Errorf("%w: %s does not exist", ErrSandboxGone, path)
	}
	if err != nil {
		return netns.None(), SandboxID{}, fmt.Errorf("open the container's network namespace %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return netns.None(), SandboxID{}, fmt.Errorf("read the container's network namespace %s: %w", path, err)
	}
	var ns unix.Statfs_t
	if err := unix.Fstatfs(fd, &ns); err != nil || ns.Type != unix.NSFS_MAGIC {
		unix.Close(fd)
		return netns.None(), SandboxID{}, fmt.Errorf("%w: %s is not a namespace (no longer mounted)", ErrSandboxGone, path)
	}
	return netns.NsHandle(fd), SandboxID{Dev: st.Dev, Ino: st.Ino}, nil
}

// SandboxInterface finds an endpoint's interface in the namespace at
// path: the link with mac, or (mac "", ipvlan) the link holding addr.
// A missing path or link wraps ErrSandboxGone or ErrNotFound.
func (k *Kernel) SandboxInterface(ctx context.Context, path, mac string, addr netip.Addr) (SandboxID, SandboxLink, error) {
	ns, id, err := openSandbox(path)
	if err != nil {
		return id, SandboxLink{}, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return id, SandboxLink{}, fmt.Errorf("enter the container's network namespace %s: %w%s", path, err, capHint(err))
	}
	defer h.Close()
	ls, err := h.LinkList()
	if err != nil {
		return id, SandboxLink{}, fmt.Errorf("list the links of the container's network namespace %s: %w", path, err)
	}
	for _, l := range ls {
		a := l.Attrs()
		switch {
		case mac != "":
			if a.HardwareAddr.String() != mac {
				continue
			}
		case !addr.IsValid():
			continue
		default:
			addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return id, SandboxLink{}, fmt.Errorf("list the addresses of %s in %s: %w", a.Name, path, err)
			}
			if !holds(addrs, addr) {
				continue
			}
		}
		out := SandboxLink{Name: a.Name, ParentIndex: a.ParentIndex, MTU: a.MTU, MAC: a.HardwareAddr.String(), Up: a.Flags&net.FlagUp != 0}
		routes, err := h.RouteList(l, netlink.FAMILY_ALL)
		if err != nil {
			return id, SandboxLink{}, fmt.Errorf("list the routes of %s in %s: %w", a.Name, path, err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				if ones, _ := maskOf(r); ones == 0 {
					if r.Family == netlink.FAMILY_V6 {
						out.Default6 = true
					} else {
						out.Default4 = true
					}
				}
			}
		}
		return id, out, nil
	}
	return id, SandboxLink{}, fmt.Errorf("%w: no interface with MAC %q or address %v in %s", ErrNotFound, mac, addr, path)
}

// maskOf is a route's destination prefix length (0 for a default route).
func maskOf(r netlink.Route) (int, int) {
	if r.Dst == nil {
		return 0, 0
	}
	return r.Dst.Mask.Size()
}

func holds(addrs []netlink.Addr, a netip.Addr) bool {
	for _, x := range addrs {
		if y, ok := netip.AddrFromSlice(x.IP); ok && y.Unmap() == a {
			return true
		}
	}
	return false
}

// capHint says what an EPERM entering a namespace means.
func capHint(err error) string {
	if errors.Is(err, unix.EPERM) {
		return " (entering a container's network namespace needs CAP_SYS_ADMIN)"
	}
	return ""
}

// Replumb makes an endpoint's interface again in its container after the
// kernel deleted it with its parent: created there by the host's socket
// with its name, MAC and MTU, marked, IPv6 on when asked, its addresses
// (IPv6 without DAD: the address is the container's already), up, then
// its gateways and routes (added, never over a route the container has
// meanwhile: another network's default route stays). Only in the namespace r.Sandbox identifies
// (else ErrSandboxGone), never over a link of that name (ErrIfNameTaken).
// A failure after the link was made deletes it again.
func (k *Kernel) Replumb(ctx context.Context, r Replumb) error {
	ns, id, err := openSandbox(r.Path)
	if err != nil {
		return err
	}
	defer ns.Close()
	if id != r.Sandbox {
		return fmt.Errorf("%w: %s is another namespace now (inode %d, was %d)", ErrSandboxGone, r.Path, id.Ino, r.Sandbox.Ino)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("enter the container's network namespace %s: %w%s", r.Path, err, capHint(err))
	}
	defer h.Close()
	name := r.Link.Name
	if old, err := h.LinkByName(name); err == nil {
		// One underlay made and did not finish (killed in between) is
		// made again; anything else is left alone.
		a := old.Attrs()
		if a.Alias != r.Link.Mark || r.Link.Mark == "" || (r.Link.MAC != "" && a.HardwareAddr.String() != r.Link.MAC) {
			return fmt.Errorf("%w: %s in %s", ErrIfNameTaken, name, r.Path)
		}
		if err := h.LinkDel(old); err != nil {
			return fmt.Errorf("delete the unfinished %s in %s: %w", name, r.Path, err)
		}
	}
	l, err := k.endpointLink(ctx, r.Link)
	if err != nil {
		return err
	}
	l.Attrs().Namespace = netlink.NsFd(int(ns))
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkAdd(l) }); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s in %s", ErrIfNameTaken, name, r.Path)
		}
		return fmt.Errorf("create %s link %s in %s: %w%s", l.Type(), name, r.Path, err, explain(err, l))
	}
	made, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find the new link %s in %s: %w", name, r.Path, err)
	}
	fail := func(what string, err error) error {
		if derr := h.LinkDel(made); derr != nil {
			err = fmt.Errorf("%w (and it could not be deleted again: %w)", err, derr)
		}
		return fmt.Errorf("%s of the new link %s in %s: %w", what, name, r.Path, err)
	}
	if err := h.LinkSetAlias(made, r.Link.Mark); err != nil {
		return fail("mark", err)
	}
	if r.IPv6 {
		if err := inNetns(ns, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("0"), 0)
		}); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail("turn IPv6 on", err)
		}
	}
	for _, a := range r.Addrs {
		ad := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
		if a.Addr().Is6() {
			ad.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(made, ad); err != nil && !errors.Is(err, unix.EEXIST) {
			return fail("address "+a.String(), err)
		}
	}
	if err := h.LinkSetUp(made); err != nil {
		return fail("bring up", err)
	}
	idx := made.Attrs().Index
	for _, gw := range r.Gateways {
		rt := &netlink.Route{LinkIndex: idx, Gw: gw.AsSlice()}
		if err := h.RouteAdd(rt); err != nil && !errors.Is(err, unix.EEXIST) {
			return fail("default route via "+gw.String(), err)
		}
	}
	for _, rr := range r.Routes {
		rt := &netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: rr.Dst.Addr().AsSlice(), Mask: net.CIDRMask(rr.Dst.Bits(), rr.Dst.Addr().BitLen())}}
		if rr.Via.IsValid() {
			rt.Gw = rr.Via.AsSlice()
		} else {
			rt.Scope = netlink.SCOPE_LINK
		}
		if err := h.RouteAdd(rt); err != nil && !errors.Is(err, unix.EEXIST) {
			return fail("route to "+rr.Dst.String(), err)
		}
	}
	return nil
}

// endpointLink is the netlink link AddEndpoint makes for ep.
func (k *Kernel) endpointLink(ctx context.Context, ep kernel.Endpoint) (netlink.Link, error) {
	idx, err := k.index(ctx, ep.Parent)
	if err != nil {
		return nil, fmt.Errorf("create %s link %s: parent: %w", ep.Type, ep.Name, err)
	}
	attrs := netlink.LinkAttrs{Name: ep.Name, ParentIndex: idx, MTU: ep.MTU}
	if ep.MAC != "" {
		mac, err := net.ParseMAC(ep.MAC)
		if err != nil {
			return nil, fmt.Errorf("create %s link %s: MAC %q: %w", ep.Type, ep.Name, ep.MAC, err)
		}
		attrs.HardwareAddr = mac
	}
	switch ep.Type {
	case kernel.KindMacvlan:
		mode, ok := macvlanModes[ep.Mode]
		if !ok {
			return nil, fmt.Errorf("create macvlan link %s: unknown mode %q", ep.Name, ep.Mode)
		}
		return &netlink.Macvlan{LinkAttrs: attrs, Mode: mode}, nil
	case kernel.KindIpvlan:
		mode, ok := ipvlanModes[ep.Mode]
		flag, okf := ipvlanFlags[ep.Flag]
		if !ok || !okf {
			return nil, fmt.Errorf("create ipvlan link %s: unknown mode %q or flag %q", ep.Name, ep.Mode, ep.Flag)
		}
		return &netlink.IPVlan{LinkAttrs: attrs, Mode: mode, Flag: flag}, nil
	}
	return nil, fmt.Errorf("create link %s: unknown type %q", ep.Name, ep.Type)
}

// inNetns runs fn on a thread in the namespace ns (for what only a
// thread inside it can do: its sysctls under /proc/sys/net).
func inNetns(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("read this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the namespace: %w%s", err, capHint(err))
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// This thread cannot go back: it ends with its goroutine.
			done <- errors.Join(ferr, fmt.Errorf("leave the namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}
