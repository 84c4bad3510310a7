// Package lan holds what the driver asks and tells the LAN about an
// endpoint's addresses: the address probe before CreateEndpoint answers
// (probe.go), the announcements after Join (announce.go), the claims
// DHCP creates in flight hold on the offers they are checking (claims.go),
// and the MAC of a macvlan endpoint Docker gave none (Chooser, macs.go:
// the stable MAC of its parent and address, mac_address_policy=stable,
// read from the kernel's links, or a random one).
//
// Rule: it reaches the kernel only through reads of netlinkutil.Links and
// its own small interfaces (a route lister, a prober, an announcer), and
// never the store; the options it reads and the MAC derivation are the
// config and plan packages'.
package lan

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/runs"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Prober probes addresses on a parent link (probe.Prober). A conflict
// is an error wrapping probe.ErrConflict.
type Prober interface {
	Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
	ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
}

// Announcer announces addresses on a parent link (probe.Prober).
type Announcer interface {
	Announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error
	AnnounceIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error
}

// RouteLister lists the routes of every table (netlinkutil.Kernel), all
// of them or those through one link.
type RouteLister interface {
	Routes(ctx context.Context) ([]kernel.Route, error)
	RoutesVia(ctx context.Context, index int) ([]kernel.Route, error)
}

// LAN probes and announces endpoints' addresses. Prober, Announcer and
// Routes may be nil: nothing is probed, nothing announced, and only
// networks with address_probe or DHCP are probed.
type LAN struct {
	Links     netlinkutil.Links
	Routes    RouteLister
	Prober    Prober
	Announcer Announcer
	Log       *slog.Logger

	running runs.Set // the announcement runs under way, by endpoint: Leave and Close end them
}

// MAC is the MAC an endpoint's probes and announcements are sent from:
// its own (macvlan), the parent's (ipvlan endpoints share it).
func (l *LAN) MAC(ctx context.Context, n record.Network, ep record.Endpoint) (net.HardwareAddr, error) {
	mac := ep.MAC
	if n.Type == kernel.KindIpvlan {
		p, err := l.Links.LinkByName(ctx, n.Parent)
		if err != nil {
			return nil, err
		}
		mac = p.MAC
	}
	return net.ParseMAC(mac)
}
