// Package netlinkutil owns every kernel link operation underlay makes: it
// reads links, creates VLAN, dummy, macvlan and ipvlan links and deletes
// them, through github.com/vishvananda/netlink on NETLINK_ROUTE only.
//
// The driver sees the kernel only through the Links interface, so it is
// unit-tested against the in-memory kernel of package nltest. Transient
// kernel errors (interrupted dumps, a full socket buffer) are retried a
// bounded number of times here, not by callers; permanent answers (EBUSY,
// EADDRINUSE, EEXIST) are reported once, with what they mean.
//
// Every link created here carries a mark (IFLA_IFALIAS, see Mark) naming
// the state file that owns it.
package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotFound is wrapped by Get when no link has the name.
var ErrNotFound = errors.New("link not found")

// Links is the kernel as the driver uses it. Every method acts on the
// namespace the process runs in.
type Links interface {
	// Get returns the link with the name or altname, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) (kernel.Link, error)
	// List returns every link.
	List(ctx context.Context) ([]kernel.Link, error)
	// LinkByIndex returns the link with the index, or an error wrapping
	// ErrNotFound, without its Alias, AltNames, Mode and Flag (kept.go:
	// ask Get for them).
	LinkByIndex(ctx context.Context, index int) (kernel.Link, error)
	// LinkByName returns the link whose name is name, or an error
	// wrapping ErrNotFound, without its Alias, AltNames, Mode, Flag and
	// Wireless (kept.go: ask Get for them); an altname is found too, by
	// asking the kernel as Get does.
	LinkByName(ctx context.Context, name string) (kernel.Link, error)
	// LinksOn returns the links whose lower link is parent (by index),
	// without their Alias, AltNames, Mode and Flag (kept.go: ask Get).
	LinksOn(ctx context.Context, parent int) ([]kernel.Link, error)
	// AddVLAN creates an up VLAN link name on base with the given ID,
	// marked with mark.
	AddVLAN(ctx context.Context, name, base string, id, mtu int, mark string) error
	// AddDummy creates an up dummy link marked with mark.
	AddDummy(ctx context.Context, name string, mtu int, mark string) error
	// AddEndpoint creates a macvlan or ipvlan link, left down, marked with
	// ep.Mark.
	AddEndpoint(ctx context.Context, ep kernel.Endpoint) error
	// Delete removes the named link; a missing link is not an error.
	Delete(ctx context.Context, name string) error
	// DeleteLink removes the link Get returned, by its index, without
	// looking it up again; a link gone since is not an error. It returns
	// once the link is out of the namespace (name, index and MAC free),
	// possibly before the kernel has finished freeing it.
	DeleteLink(ctx context.Context, l kernel.Link) error
	// AddShim creates a macvlan or ipvlan link of the host (marked with
	// ep.Mark) with addr as a host address, up.
	AddShim(ctx context.Context, ep kernel.Endpoint, addr netip.Addr) error
	// AddHostRoute routes one address through a link; a route to it
	// through another link (or none) is refused with a *RouteHeldError,
	// never replaced.
	AddHostRoute(ctx context.Context, dst netip.Addr, dev string) error
	// DelHostRoute deletes that route; a missing one is not an error.
	DelHostRoute(ctx context.Context, dst netip.Addr, dev string) error
	// LinkAddrs returns the addresses of the named link (both families).
	LinkAddrs(ctx context.Context, name string) ([]netip.Addr, error)
	// OwnAddr reports whether addr is one of the host's own addresses,
	// and a link that carries it (ownaddr.go); scope is the link a
	// link-local IPv6 address is looked up on.
	OwnAddr(ctx context.Context, addr netip.Addr, scope int) (link string, own bool, err error)
	// Heal puts back on an existing link what underlay gave it: the MTU
	// (when h.MTU is set and differs), a host address (when h.Addr is
	// valid and missing), and the up flag.
	Heal(ctx context.Context, name string, h Heal) error
	// Subscribe streams link events (and the removal of addresses) until
	// ctx ends.
	Subscribe(ctx context.Context, onError func(error)) (<-chan LinkEvent, error)
}

// Kernel implements Links with netlink in the process's network namespace,
// or the one NewAt was given.
type Kernel struct {
	// ns is the namespace every socket is opened in (netns.None(): the
	// process's own).
	ns netns.NsHandle
	// handles are the NETLINK_ROUTE sockets requests take turns on; a
	// request has one to itself.
	handles *handles
	// deletions lets DeleteLink answer before the kernel's cleanup ends.
	deletions *deletions
	attempts  int
	backoff   time.Duration
	// nftMu serializes the nftables changes of lostaddr.go.
	nftMu sync.Mutex
	// kept, once Keep has run, answers the reads (kept.go).
	kept atomic.Pointer[kept]
}

// New returns the real kernel of the process's network namespace.
func New() *Kernel { return NewAt(netns.None()) }

// NewAt returns the real kernel of the namespace ns, which must stay open
// while the Kernel is used (tests and benchmarks: the daemon uses New).
func NewAt(ns netns.NsHandle) *Kernel {
	return &Kernel{ns: ns, handles: newHandles(ns), deletions: newDeletions(), attempts: 6, backoff: 5 * time.Millisecond}
}

var macvlanModes = map[string]netlink.MacvlanMode{
	kernel.MacvlanBridge: netlink.MACVLAN_MODE_BRIDGE, kernel.MacvlanPrivate: netlink.MACVLAN_MODE_PRIVATE,
	kernel.MacvlanVEPA: netlink.MACVLAN_MODE_VEPA, kernel.MacvlanPassthru: netlink.MACVLAN_MODE_PASSTHRU,
}

var ipvlanModes = map[string]netlink.IPVlanMode{
	kernel.IpvlanL2: netlink.IPVLAN_MODE_L2, kernel.IpvlanL3: netlink.IPVLAN_MODE_L3, kernel.IpvlanL3S: netlink.IPVLAN_MODE_L3S,
}

var ipvlanFlags = map[string]netlink.IPVlanFlag{
	kernel.IpvlanFlagBridge: netlink.IPVLAN_FLAG_BRIDGE, kernel.IpvlanFlagPrivate: netlink.IPVLAN_FLAG_PRIVATE, kernel.IpvlanFlagVEPA: netlink.IPVLAN_FLAG_VEPA,
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
// again: a dump that raced with a change, an interrupted call, a full socket
// buffer. EBUSY (a parent carrying the other link type, or taken by
// passthru) and EADDRINUSE (a MAC another link on the parent has) are the
// kernel's final answers and are not retried.
func transient(err error) bool {
	return errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, netlink.ErrDumpInterrupted)
}

// retry runs op until it succeeds, fails for good, the attempts run out or
// ctx ends.
//
// A dump interrupted by a concurrent change (links created and deleted
// while it runs) is retried at once and many more times: under heavy link
// churn most dumps race with something, and waiting longer does not help.
func (k *Kernel) retry(ctx context.Context, op func(h *netlink.Handle) error) error {
	delay := k.backoff
	var err error
	attempts := k.attempts
	for i := 0; i < attempts; i++ {
		if err = k.with(op); err == nil || !transient(err) {
			return err
		}
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			attempts = max(attempts, dumpAttempts)
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("%w (gave up: %w)", err, cerr)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(delay):
		}
		delay *= 2
	}
	return fmt.Errorf("%w (still failing after %d attempts)", err, attempts)
}

// dumpAttempts bounds the retries of an interrupted dump.
const dumpAttempts = 100

func convert(l netlink.Link) kernel.Link {
	a := l.Attrs()
	out := kernel.Link{Name: a.Name, Index: a.Index, Kind: l.Type(), ParentIndex: a.ParentIndex, MTU: a.MTU,
		Alias: a.Alias, AltNames: a.AltNames, Encap: a.EncapType, Down: a.Flags&net.FlagUp == 0}
	out.NoCarrier = !out.Down && a.RawFlags&unix.IFF_LOWER_UP == 0
	if a.HardwareAddr != nil {
		out.MAC = a.HardwareAddr.String()
	}
	if len(a.PermHWAddr) > 0 {
		out.PermMAC = a.PermHWAddr.String()
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
func (k *Kernel) Get(ctx context.Context, name string) (kernel.Link, error) {
	var l netlink.Link
	err := k.retry(ctx, func(h *netlink.Handle) (err error) { l, err = h.LinkByName(name); return err })
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return kernel.Link{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return kernel.Link{}, fmt.Errorf("look up link %s: %w", name, err)
	}
	out := convert(l)
	out.Wireless = isWireless(out.Name)
	return out, nil
}

// isWireless reports whether sysfs shows the link as an 802.11 device
// (cfg80211 links have phy80211; wext ones wireless). Sysfs shows the
// namespace it was mounted in: the host's for the daemon and the CLI.
func isWireless(name string) bool {
	for _, entry := range []string{"phy80211", "wireless"} {
		if _, err := os.Stat(filepath.Join("/sys/class/net", name, entry)); err == nil {
			return true
		}
	}
	return false
}

// List implements Links.
func (k *Kernel) List(ctx context.Context) ([]kernel.Link, error) {
	var ls []netlink.Link
	if err := k.retry(ctx, func(h *netlink.Handle) (err error) { ls, err = h.LinkList(); return err }); err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make([]kernel.Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, convert(l))
	}
	return out, nil
}

// LinkByName implements Links.
func (k *Kernel) LinkByName(ctx context.Context, name string) (kernel.Link, error) {
	if s := k.kept.Load(); s != nil {
		if l, ok, err := s.byName(ctx, name); err == nil && ok {
			return l, nil
		}
	}
	l, err := k.Get(ctx, name) // not kept, or an altname
	if err != nil {
		return kernel.Link{}, err
	}
	l = Unannounced(l)
	l.Wireless = false
	return l, nil
}

// LinkByIndex implements Links.
func (k *Kernel) LinkByIndex(ctx context.Context, index int) (kernel.Link, error) {
	if s := k.kept.Load(); s != nil {
		l, ok, err := s.byIndex(ctx, index)
		switch {
		case err == nil && !ok:
			return kernel.Link{}, fmt.Errorf("%w: index %d", ErrNotFound, index)
		case err == nil:
			return l, nil
		}
	}
	var l netlink.Link
	err := k.retry(ctx, func(h *netlink.Handle) (err error) { l, err = h.LinkByIndex(index); return err })
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return kernel.Link{}, fmt.Errorf("%w: index %d", ErrNotFound, index)
	}
	if err != nil {
		return kernel.Link{}, fmt.Errorf("look up link %d: %w", index, err)
	}
	return Unannounced(convert(l)), nil
}

// LinksOn implements Links.
func (k *Kernel) LinksOn(ctx context.Context, parent int) ([]kernel.Link, error) {
	if s := k.kept.Load(); s != nil {
		if ls, err := s.on(ctx, parent); err == nil {
			return ls, nil
		}
	}
	ls, err := k.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []kernel.Link
	for _, l := range ls {
		if l.ParentIndex == parent && l.Index != parent {
			out = append(out, Unannounced(l))
		}
	}
	return out, nil
}

// add creates the link, marks it (the kernel ignores IFLA_IFALIAS at
// creation, so the alias is set right after) and brings it up when up is
// set. If marking or bringing it up fails the link is deleted again, so a
// failed add leaves nothing.
func (k *Kernel) add(ctx context.Context, l netlink.Link, mark string, up bool) error {
	name := l.Attrs().Name
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkAdd(l) }); err != nil {
		return fmt.Errorf("create %s link %s: %w%s", l.Type(), name, err, explain(err, l))
	}
	undo := func(what string, err error) error {
		_ = k.with(func(h *netlink.Handle) error { return h.LinkDel(l) })
		return fmt.Errorf("%s %s link %s: %w", what, l.Type(), name, err)
	}
	if mark != "" {
		if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetAlias(l, mark) }); err != nil {
			return undo("mark", err)
		}
	}
	if !up {
		return nil
	}
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkSetUp(l) }); err != nil {
		return undo("bring up", err)
	}
	return nil
}

// explain says what a permanent refusal of a new link means.
func explain(err error, l netlink.Link) string {
	switch {
	case errors.Is(err, unix.EBUSY) && (l.Type() == kernel.KindMacvlan || l.Type() == kernel.KindIpvlan):
		return " (the parent link carries links of the other type, macvlan or ipvlan, or is taken by a macvlan passthru link: the kernel allows one kind per parent)"
	case errors.Is(err, unix.EADDRINUSE):
		return fmt.Sprintf(" (MAC %s is already used by another link on the parent: use another MAC address)", l.Attrs().HardwareAddr)
	}
	return ""
}

func (k *Kernel) index(ctx context.Context, name string) (int, error) {
	l, err := k.LinkByName(ctx, name)
	if err != nil {
		return 0, err
	}
	return l.Index, nil
}

// AddVLAN implements Links.
func (k *Kernel) AddVLAN(ctx context.Context, name, base string, id, mtu int, mark string) error {
	idx, err := k.index(ctx, base)
	if err != nil {
		return fmt.Errorf("create VLAN link %s: base link: %w", name, err)
	}
	return k.add(ctx, &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: idx, MTU: mtu}, VlanId: id}, mark, true)
}

// AddDummy implements Links.
func (k *Kernel) AddDummy(ctx context.Context, name string, mtu int, mark string) error {
	return k.add(ctx, &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}, mark, true)
}

// AddEndpoint implements Links.
func (k *Kernel) AddEndpoint(ctx context.Context, ep kernel.Endpoint) error {
	l, err := k.endpointLink(ctx, ep)
	if err != nil {
		return err
	}
	return k.add(ctx, l, ep.Mark, false)
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
	return k.DeleteLink(ctx, l)
}
