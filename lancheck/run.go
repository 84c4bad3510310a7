package lancheck

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netns"
)

// Kernel is what Observe reads of the host (netlinkutil.Kernel is one).
type Kernel interface {
	// Get returns the named link (with Wireless filled).
	Get(ctx context.Context, name string) (kernel.Link, error)
	// RoutesVia returns the routes through the link with the index.
	RoutesVia(ctx context.Context, index int) ([]kernel.Route, error)
}

// Env is what Observe acts through.
type Env struct {
	Kernel Kernel
	// Netns is the namespace the parent is in; not open: the process's.
	Netns netns.NsHandle
	// Mark is the alias the throwaway child link carries.
	Mark string
	Log  *slog.Logger
}

// Run observes the LAN of n's parent within ctx's deadline and judges
// what it saw.
func Run(ctx context.Context, env Env, n Network) []Item {
	return Judge(n, Observe(ctx, env, n))
}

// gateway4 is the IPv4 address the reach checks ask for: the network's
// gateway, else the host's default route's through the parent, else the
// router of a DHCP offer.
func gateway4(n Network, o Observations) (netip.Addr, string) {
	switch {
	case n.Gateway4.IsValid():
		return n.Gateway4, "the network's gateway"
	case o.HostGateway4.IsValid():
		return o.HostGateway4, "the host's default route's gateway through " + n.Parent
	}
	for _, of := range o.Offers {
		if of.Router.IsValid() {
			return of.Router, "the router of " + of.Server.String() + "'s DHCP offer"
		}
	}
	return netip.Addr{}, ""
}
