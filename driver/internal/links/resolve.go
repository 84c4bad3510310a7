package links

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
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
// plan.ResolveParent turns the option into the one name this node
// resolves as if the user had given it; it is pure, over the node's links
// and routes, which the Resolver reads. The record keeps the option as
// asked and the link it resolved to; reuse compares what was asked.

// RouteLister lists the routes of every table (netlinkutil.Kernel).
type RouteLister interface {
	Routes(ctx context.Context) ([]kernel.Route, error)
}

// Resolver resolves a network's parent option on this host. Routes may be
// nil: parent=auto is then refused.
type Resolver struct {
	Links  netlinkutil.Links
	Routes RouteLister
}

// Resolve resolves the network's parent on this host. A plain name that
// exists as an ordinary parent needs one lookup (the kernel resolves
// altnames); anything else (a VLAN to find or create, a link to refuse
// naming its lower link, candidates, auto) lists every link once, and
// auto the routes too.
func (r *Resolver) Resolve(ctx context.Context, n record.Network) (plan.Resolution, error) {
	spec, err := config.ParseParent(plan.RequestedParent(n))
	if err != nil {
		return plan.Resolution{}, err
	}
	if !spec.Multiple() {
		name := config.DummyName(n.ID)
		if len(spec.Candidates) == 1 {
			name = spec.Candidates[0]
		}
		l, err := r.Links.Get(ctx, name)
		switch {
		case err == nil && !kernel.IsEndpointKind(l.Kind):
			res, err := plan.ResolveParent(n, []kernel.Link{l}, nil)
			if err == nil && res.Create == nil && res.Name == l.Name {
				res.Link = &l // the create's wireless check reads it (lancheck.Refuse)
			}
			return res, err
		case err != nil && !errors.Is(err, netlinkutil.ErrNotFound):
			return plan.Resolution{}, err
		}
	}
	links, err := r.Links.List(ctx)
	if err != nil {
		return plan.Resolution{}, err
	}
	var routes []kernel.Route
	if spec.Auto {
		if r.Routes == nil {
			return plan.Resolution{}, fmt.Errorf("parent=%s needs the host's routes, and this daemon was built without access to them: pass -o parent=IFACE", plan.RequestedParent(n))
		}
		if routes, err = r.Routes.Routes(ctx); err != nil {
			return plan.Resolution{}, err
		}
	}
	return plan.ResolveParent(n, links, routes)
}
