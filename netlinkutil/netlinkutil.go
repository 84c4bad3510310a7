// Package netlinkutil owns every kernel link operation underlay makes: it
// reads links, creates VLAN, dummy, macvlan and ipvlan links and deletes
// them, through github.com/vishvananda/netlink on NETLINK_ROUTE only.
//
// The driver sees the kernel only through the Links interface, so it is
// unit-tested against the in-memory kernel of package nltest. Transient
// kernel errors (EBUSY from a link still going away, interrupted dumps) are
// retried a bounded number of times here, not by callers.
package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNotFound is wrapped by Get when no link has the name.
var ErrNotFound = errors.New("link not found")

// MaxNameLen is the longest interface name the kernel accepts (IFNAMSIZ-1).
const MaxNameLen = 15

// Link is what underlay needs to know about a kernel link.
type Link struct {
	Name  string
	Index int
	// Kind is the rtnetlink kind: "macvlan", "ipvlan", "vlan", "dummy",
	// "veth", "bridge", "device" (a physical NIC or loopback), ...
	Kind string
	// ParentIndex is the index of the lower link (macvlan, ipvlan, vlan).
	ParentIndex int
	MTU         int
	// VLAN is the 802.1Q ID of a vlan link.
	VLAN int
	// Mode is the macvlan or ipvlan mode ("bridge", "l2", ...).
	Mode string
	// Flag is the ipvlan flag ("bridge", "private", "vepa").
	Flag string
	MAC  string
}

// Endpoint describes a macvlan or ipvlan link to create.
type Endpoint struct {
	Name string
	// Parent is the name of the lower link.
	Parent string
	// Type is "macvlan" or "ipvlan".
	Type string
	// Mode is the macvlan mode or the ipvlan mode, Flag the ipvlan flag.
	Mode, Flag string
	// MTU is set at creation when non-zero.
	MTU int
	// MAC is set at creation when non-empty (macvlan only).
	MAC string
}

// Links is the kernel as the driver uses it. Every method acts on the
// namespace the process runs in.
type Links interface {
	// Get returns the named link or an error wrapping ErrNotFound.
	Get(ctx context.Context, name string) (Link, error)
	// List returns every link.
	List(ctx context.Context) ([]Link, error)
	// AddVLAN creates an up VLAN link name on base with the given ID.
	AddVLAN(ctx context.Context, name, base string, id, mtu int) error
	// AddDummy creates an up dummy link.
	AddDummy(ctx context.Context, name string, mtu int) error
	// AddEndpoint creates a macvlan or ipvlan link, left down.
	AddEndpoint(ctx context.Context, ep Endpoint) error
	// Delete removes the named link; a missing link is not an error.
	Delete(ctx context.Context, name string) error
}

// Kernel implements Links with netlink in the process's network namespace.
type Kernel struct {
	// h has no sockets of its own: each request opens a NETLINK_ROUTE
	// socket, so concurrent requests do not queue behind one socket.
	h        netlink.Handle
	attempts int
	backoff  time.Duration
}

// New returns the real kernel.
func New() *Kernel {
	return &Kernel{attempts: 6, backoff: 5 * time.Millisecond}
}

var macvlanModes = map[string]netlink.MacvlanMode{
	"bridge": netlink.MACVLAN_MODE_BRIDGE, "private": netlink.MACVLAN_MODE_PRIVATE,
	"vepa": netlink.MACVLAN_MODE_VEPA, "passthru": netlink.MACVLAN_MODE_PASSTHRU,
}

var ipvlanModes = map[string]netlink.IPVlanMode{
	"l2": netlink.IPVLAN_MODE_L2, "l3": netlink.IPVLAN_MODE_L3, "l3s": netlink.IPVLAN_MODE_L3S,
}

var ipvlanFlags = map[string]netlink.IPVlanFlag{
	"bridge": netlink.IPVLAN_FLAG_BRIDGE, "private": netlink.IPVLAN_FLAG_PRIVATE, "vepa": netlink.IPVLAN_FLAG_VEPA,
}

func nameOf[K comparable](m map[string]K, v K) string {
	for name, val := range m {
		if val == v {
			return name
		}
	}
	return ""
}

// transient reports whether a failed link operation may succeed if tried
// again: a link of the same name or MAC still being torn down, a dump that
// raced with a change, a full socket buffer.
func transient(err error) bool {
	return errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EADDRINUSE) || errors.Is(err, netlink.ErrDumpInterrupted)
}

// retry runs op until it succeeds, fails for good, the attempts run out or
// ctx ends.
func (k *Kernel) retry(ctx context.Context, op func() error) error {
	delay := k.backoff
	var err error
	for i := 0; i < k.attempts; i++ {
		if err = op(); err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(delay):
		}
		delay *= 2
	}
	return fmt.Errorf("%w (still failing after %d attempts)", err, k.attempts)
}

func convert(l netlink.Link) Link {
	a := l.Attrs()
	out := Link{Name: a.Name, Index: a.Index, Kind: l.Type(), ParentIndex: a.ParentIndex, MTU: a.MTU}
	if a.HardwareAddr != nil {
		out.MAC = a.HardwareAddr.String()
	}
	switch v := l.(type) {
	case *netlink.Macvlan:
		out.Mode = nameOf(macvlanModes, v.Mode)
	case *netlink.IPVlan:
		out.Mode, out.Flag = nameOf(ipvlanModes, v.Mode), nameOf(ipvlanFlags, v.Flag)
	case *netlink.Vlan:
		out.VLAN = v.VlanId
	}
	return out
}

// Get implements Links.
func (k *Kernel) Get(ctx context.Context, name string) (Link, error) {
	var l netlink.Link
	err := k.retry(ctx, func() (err error) { l, err = k.h.LinkByName(name); return err })
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return Link{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Link{}, fmt.Errorf("look up link %s: %w", name, err)
	}
	return convert(l), nil
}

// List implements Links.
func (k *Kernel) List(ctx context.Context) ([]Link, error) {
	var ls []netlink.Link
	if err := k.retry(ctx, func() (err error) { ls, err = k.h.LinkList(); return err }); err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, convert(l))
	}
	return out, nil
}

// add creates the link and brings it up when up is set. If bringing it up
// fails the link is deleted again, so a failed add leaves nothing.
func (k *Kernel) add(ctx context.Context, l netlink.Link, up bool) error {
	name := l.Attrs().Name
	if err := k.retry(ctx, func() error { return k.h.LinkAdd(l) }); err != nil {
		return fmt.Errorf("create %s link %s: %w", l.Type(), name, err)
	}
	if !up {
		return nil
	}
	if err := k.retry(ctx, func() error { return k.h.LinkSetUp(l) }); err != nil {
		_ = k.Delete(context.WithoutCancel(ctx), name)
		return fmt.Errorf("bring up %s link %s: %w", l.Type(), name, err)
	}
	return nil
}

func (k *Kernel) index(ctx context.Context, name string) (int, error) {
	l, err := k.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	return l.Index, nil
}

// AddVLAN implements Links.
func (k *Kernel) AddVLAN(ctx context.Context, name, base string, id, mtu int) error {
	idx, err := k.index(ctx, base)
	if err != nil {
		return fmt.Errorf("create VLAN link %s: base link: %w", name, err)
	}
	return k.add(ctx, &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: idx, MTU: mtu}, VlanId: id}, true)
}

// AddDummy implements Links.
func (k *Kernel) AddDummy(ctx context.Context, name string, mtu int) error {
	return k.add(ctx, &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}, true)
}

// AddEndpoint implements Links.
func (k *Kernel) AddEndpoint(ctx context.Context, ep Endpoint) error {
	idx, err := k.index(ctx, ep.Parent)
	if err != nil {
		return fmt.Errorf("create %s link %s: parent: %w", ep.Type, ep.Name, err)
	}
	attrs := netlink.LinkAttrs{Name: ep.Name, ParentIndex: idx, MTU: ep.MTU}
	if ep.MAC != "" {
		mac, err := net.ParseMAC(ep.MAC)
		if err != nil {
			return fmt.Errorf("create %s link %s: MAC %q: %w", ep.Type, ep.Name, ep.MAC, err)
		}
		attrs.HardwareAddr = mac
	}
	switch ep.Type {
	case "macvlan":
		mode, ok := macvlanModes[ep.Mode]
		if !ok {
			return fmt.Errorf("create macvlan link %s: unknown mode %q", ep.Name, ep.Mode)
		}
		return k.add(ctx, &netlink.Macvlan{LinkAttrs: attrs, Mode: mode}, false)
	case "ipvlan":
		mode, ok := ipvlanModes[ep.Mode]
		flag, okf := ipvlanFlags[ep.Flag]
		if !ok || !okf {
			return fmt.Errorf("create ipvlan link %s: unknown mode %q or flag %q", ep.Name, ep.Mode, ep.Flag)
		}
		return k.add(ctx, &netlink.IPVlan{LinkAttrs: attrs, Mode: mode, Flag: flag}, false)
	}
	return fmt.Errorf("create link %s: unknown type %q", ep.Name, ep.Type)
}

// Delete implements Links.
func (k *Kernel) Delete(ctx context.Context, name string) error {
	l, err := k.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	target := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, Index: l.Index}}
	err = k.retry(ctx, func() error { return k.h.LinkDel(target) })
	if err == nil || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("delete link %s: %w", name, err)
}
