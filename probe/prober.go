package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/internal/rawlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ErrConflict is wrapped by every *ConflictError: the address is in use
// (or wanted at the same moment) by another host on the LAN.
var ErrConflict = errors.New("address conflict on the LAN")

// ConflictError is the answer of a probe that saw another host claim the
// address.
type ConflictError struct {
	// Addr is the address probed for.
	Addr netip.Addr
	// MAC is the hardware address of the host that answered for it (the
	// ARP sender hardware address; an NA's target link-layer address, or
	// its Ethernet source without one).
	MAC net.HardwareAddr
	// Parent is the link the probe ran on.
	Parent string
	// Seen says what was received, e.g. "an ARP reply".
	Seen string
	// Probing is true when the other host was itself probing for the
	// address at the same time rather than holding it.
	Probing bool
}

// Error names the address, the MAC that answered and what it sent; the
// fix is the caller's to word (a --ip, an IPAM pool, a DHCP offer).
func (e *ConflictError) Error() string {
	what := "answered for it"
	if e.Probing {
		what = "is probing for it at the same time"
	}
	return fmt.Sprintf("address %s is in use on the LAN of parent %s: the host with MAC %s %s (%s)",
		e.Addr, e.Parent, e.MAC, what, e.Seen)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Prober sends address probes and announcements on parent links. It
// keeps no state between calls and is safe for concurrent use; each call
// opens its own packet socket for its duration.
type Prober struct {
	netns netns.NsHandle
}

// Option configures a Prober.
type Option func(*Prober)

// WithNetns makes the prober open its sockets in namespace h (for tests);
// by default they are opened in the namespace of the calling thread,
// which in the daemon is the host's.
func WithNetns(h netns.NsHandle) Option { return func(p *Prober) { p.netns = h } }

// New returns a prober.
func New(opts ...Option) *Prober {
	p := &Prober{netns: netns.None()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// probes is how many probes a Probe or ProbeIPv6 sends over its budget.
const probes = 3

// Probe checks that no host on parent's LAN holds the IPv4 address addr
// (RFC 5227 §2.1.1): it sends 3 ARP probes from mac (sender IP 0.0.0.0,
// target addr, Ethernet mac → broadcast) at 0, budget/3 and 2·budget/3,
// and listens until budget has passed. It returns a *ConflictError
// (wrapping ErrConflict) at the first ARP packet whose sender IP is addr
// from another MAC, or ARP probe for addr from another MAC; nil when none
// came within budget, which it then took in full. Budget 0 probes nothing.
// A macvlan endpoint's mac is its own (its link need not exist yet: mac is
// added to parent's unicast filter while the probe runs); an ipvlan
// endpoint's is the parent's. The end of ctx ends the probe with an error
// wrapping ctx.Err().
func (p *Prober) Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	addr = addr.Unmap()
	if err := checkIPv4(addr, "probe"); err != nil {
		return err
	}
	return p.probe(ctx, parent, mac, addr, budget, arpFilter(addr), nil, arpFrame(mac, netip.IPv4Unspecified(), addr),
		func(b []byte) *ConflictError { return arpConflict(b, mac, addr) })
}

// ProbeIPv6 checks that no host on parent's LAN holds the IPv6 address
// addr, as duplicate address detection does (RFC 4862 §5.4): 3 Neighbour
// Solicitations from mac and the unspecified address to addr's
// solicited-node group, target addr, on Probe's schedule. A conflict is
// a Neighbour Advertisement for addr from another MAC, or a Solicitation
// for addr from the unspecified address by another MAC. While it runs,
// mac is in parent's unicast filter and parent listens to the all-nodes
// and addr's solicited-node Ethernet groups. It sends no MLD report: a
// switch doing MLD snooping may keep another host's simultaneous probe
// from it (the answers to ours go to all nodes and are not affected).
func (p *Prober) ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	addr = addr.WithZone("")
	if err := checkIPv6(addr, "probe"); err != nil {
		return err
	}
	groups := []net.HardwareAddr{rawlink.MulticastMAC(allNodes), rawlink.MulticastMAC(rawlink.SolicitedNode(addr))}
	return p.probe(ctx, parent, mac, addr, budget, ndpFilter(addr), groups, dadFrame(mac, addr),
		func(b []byte) *ConflictError { return ndpConflict(b, mac, addr) })
}

// Announce tells parent's LAN that mac holds the IPv4 address addr (RFC
// 5227 §3): count ARP requests with sender IP = target IP = addr, sender
// MAC mac, Ethernet mac → broadcast, interval apart, the first at once.
// It returns when the last is sent; count 0 sends nothing.
func (p *Prober) Announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	addr = addr.Unmap()
	if err := checkIPv4(addr, "announce"); err != nil {
		return err
	}
	return p.announce(ctx, parent, mac, addr, count, interval, unix.ETH_P_ARP, arpFrame(mac, addr, addr))
}

// AnnounceIPv6 tells parent's LAN that mac holds the IPv6 address addr
// (RFC 4861 §7.2.6): count unsolicited Neighbour Advertisements from
// addr to ff02::1 (Ethernet mac → 33:33:00:00:00:01), hop limit 255,
// override set, solicited and router clear, target addr with a target
// link-layer address option mac, interval apart, the first at once. The
// source is addr itself: the endpoint's link-local address is not known
// to the daemon. It returns when the last is sent; count 0 sends nothing.
func (p *Prober) AnnounceIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	addr = addr.WithZone("")
	if err := checkIPv6(addr, "announce"); err != nil {
		return err
	}
	return p.announce(ctx, parent, mac, addr, count, interval, unix.ETH_P_IPV6, naFrame(mac, addr))
}

func (p *Prober) announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration, proto int, frame []byte) error {
	if err := check(parent, mac, "announce", addr); err != nil {
		return err
	}
	if count < 0 || interval < 0 {
		return fmt.Errorf("announce %s on parent %s: count %d and interval %s must not be negative: give 0 or more", addr, parent, count, interval)
	}
	if count == 0 {
		return nil
	}
	c, err := p.listen(parent, proto, dropAll(), nil, nil)
	if err != nil {
		return fmt.Errorf("announce %s on parent %s: %w", addr, parent, err)
	}
	defer c.Close()
	if err := repeat(ctx, c, frame, count, interval); err != nil {
		return fmt.Errorf("announce %s on parent %s: %w", addr, parent, err)
	}
	return nil
}

// probe runs a probe of addr from mac on parent: a socket with filter
// (behind rawlink.Untagged) and mac and groups joined, frame sent on
// run's schedule, conflict judging what comes in; a conflict gets
// parent put in.
func (p *Prober) probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration,
	filter []bpf.Instruction, groups []net.HardwareAddr, frame []byte, conflict func([]byte) *ConflictError) error {
	if err := check(parent, mac, "probe", addr); err != nil {
		return err
	}
	if budget < 0 {
		return fmt.Errorf("probe %s on parent %s: budget %s is negative: give a duration, or 0 for no probe", addr, parent, budget)
	}
	if budget == 0 {
		return nil
	}
	c, err := p.listen(parent, unix.ETH_P_ALL, rawlink.Untagged(filter), mac, groups)
	if err != nil {
		return fmt.Errorf("probe %s on parent %s: %w", addr, parent, err)
	}
	err = run(ctx, c, frame, budget, conflict)
	var ce *ConflictError
	if errors.As(err, &ce) {
		ce.Parent = parent
		return ce
	}
	if err != nil {
		return fmt.Errorf("probe %s on parent %s: %w", addr, parent, err)
	}
	return nil
}

// check refuses what no probe or announcement can be made with.
func check(parent string, mac net.HardwareAddr, op string, addr netip.Addr) error {
	if parent == "" {
		return fmt.Errorf("%s %s: no parent link given: name the link the endpoint is on", op, addr)
	}
	if len(mac) != 6 || mac[0]&1 != 0 || [6]byte(mac) == [6]byte{} {
		return fmt.Errorf("%s %s on parent %s: MAC %q is not a unicast Ethernet address: give the endpoint's MAC (ipvlan: the parent's)", op, addr, parent, mac)
	}
	return nil
}

func checkIPv4(addr netip.Addr, op string) error {
	switch {
	case !addr.IsValid():
		return fmt.Errorf("%s: no address given: give the endpoint's IPv4 address", op)
	case !addr.Is4():
		return fmt.Errorf("%s %s: not an IPv4 address: use the IPv6 variant for it", op, addr)
	case addr.IsUnspecified() || addr.IsMulticast() || addr.IsLoopback() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s %s: not a unicast address a host can hold: give the endpoint's address", op, addr)
	}
	return nil
}

func checkIPv6(addr netip.Addr, op string) error {
	switch {
	case !addr.IsValid():
		return fmt.Errorf("%s: no address given: give the endpoint's IPv6 address", op)
	case !addr.Is6() || addr.Is4In6():
		return fmt.Errorf("%s %s: not an IPv6 address: use the IPv4 variant for it", op, addr)
	case addr.IsUnspecified() || addr.IsMulticast() || addr.IsLoopback():
		return fmt.Errorf("%s %s: not a unicast address a host can hold: give the endpoint's address", op, addr)
	}
	return nil
}
