package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Per-node parents. One network definition serves nodes whose NICs are
// named differently (a swarm network reaches every node with the same
// options), so the parent option may name more than one link:
//
//	parent=eth0             that link
//	parent=lan-a,lan-b      the first candidate that exists on this node
//	                        (IFACE.VID candidates count when IFACE exists)
//	parent=auto             the link whose connected route holds the
//	                        network's IPv4 subnet, else the default route's
//	parent=auto.VID         VLAN VID on the link auto picks
//
// pickParent turns the option into the one name this node resolves as if
// the user had given it (resolve.go); it is pure, over the node's links
// and routes. The record keeps the option as asked and the link it
// resolved to; reuse compares what was asked.

// resolve resolves the network's parent on this host. A plain name that
// exists as an ordinary parent needs one lookup (the kernel resolves
// altnames); anything else (a VLAN to find or create, a link to refuse
// naming its lower link, candidates, auto) lists every link once, and
// auto the routes too.
func (d *Driver) resolve(ctx context.Context, n store.Network) (rules.Resolution, error) {
	spec, err := rules.ParseParent(rules.RequestedParent(n))
	if err != nil {
		return rules.Resolution{}, err
	}
	if !spec.Multiple() {
		name := rules.DummyName(n.ID)
		if len(spec.Candidates) == 1 {
			name = spec.Candidates[0]
		}
		l, err := d.links.Get(ctx, name)
		switch {
		case err == nil && !netlinkutil.IsEndpointKind(l.Kind):
			return rules.ResolveParent(n, []netlinkutil.Link{l}, nil)
		case err != nil && !errors.Is(err, netlinkutil.ErrNotFound):
			return rules.Resolution{}, err
		}
	}
	links, err := d.links.List(ctx)
	if err != nil {
		return rules.Resolution{}, err
	}
	var routes []netlinkutil.Route
	if spec.Auto {
		if d.routes == nil {
			return rules.Resolution{}, fmt.Errorf("parent=%s needs the host's routes, and this daemon was built without access to them: pass -o parent=IFACE", rules.RequestedParent(n))
		}
		if routes, err = d.routes.Routes(ctx); err != nil {
			return rules.Resolution{}, err
		}
	}
	return rules.ResolveParent(n, links, routes)
}
