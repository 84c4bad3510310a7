package lancheck

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netns"
)

// Kernel is what Observe reads of the host (netlinkutil.Kernel is one).
type Kernel interface {
	// Get returns the named link (with Wireless filled).
	Get(ctx context.Context, name string) (kernel.Link, error)
	// LinkByIndex returns the link with the index (a VLAN's base).
	LinkByIndex(ctx context.Context, index int) (kernel.Link, error)
	// RoutesVia returns the routes through the link with the index.
	RoutesVia(ctx context.Context, index int) ([]kernel.Route, error)
	// AddThrowaway makes a marked macvlan child of parent with mac in an
	// anonymous namespace of its own (the new-mac check).
	AddThrowaway(ctx context.Context, parent string, mac net.HardwareAddr, mark string) (*netlinkutil.Throwaway, error)
}

// Env is what Observe acts through.
type Env struct {
	Kernel Kernel
	// Netns is the namespace the parent is in; not open: the process's.
	Netns netns.NsHandle
	// Mark is the alias the throwaway child link carries.
	Mark string
	Log  *slog.Logger
	// wire is what sends and receives on the LAN; nil: the real one
	// (tests give a fake).
	wire wire
}

// Run observes the LAN of n's parent within ctx's deadline and judges
// what it saw.
func Run(ctx context.Context, env Env, n Network) []Item {
	return Judge(n, Observe(ctx, env, n))
}

// gateway4 is the IPv4 address the reach checks ask for: the network's
// gateway, else the host's default route's through the parent, else the
// router of a DHCP offer.
func gateway4(n Network, host netip.Addr, offers []dhcp.Offer) (netip.Addr, string) {
	switch {
	case n.Gateway4.IsValid():
		return n.Gateway4, "the network's gateway"
	case host.IsValid():
		return host, "the host's default route's gateway through " + n.Parent
	}
	for _, of := range offers {
		if of.Router.IsValid() {
			return of.Router, "the router of " + of.Server.String() + "'s DHCP offer"
		}
	}
	return netip.Addr{}, ""
}
