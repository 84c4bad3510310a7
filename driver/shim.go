package driver

import (
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// host_address: the host link and its routes are made by
// driver/internal/links, the routes it carries are the joins'
// (joins.Table.JoinedV4); the store's check of a new endpoint is here.

// hostRouteFree refuses an endpoint of a network with a host address whose
// IPv4 address an endpoint of another such network has: the host routes
// one address through one host link, so the second would take the first's
// route (and its Leave delete it).
func hostRouteFree(tx *store.Tx, n record.Network, ep record.Endpoint) error {
	a, ok := plan.EndpointV4(ep)
	if n.HostAddress == "" || !ok {
		return nil
	}
	return tx.ForEachNetworkWithHostAddress(func(o record.Network) error {
		if o.ID == n.ID || o.HostAddress == "" {
			return nil
		}
		eps, err := tx.Endpoints(o.ID)
		if err != nil {
			return err
		}
		for _, e := range eps {
			if b, ok := plan.EndpointV4(e); ok && b == a {
				return fmt.Errorf("%w: address %s of endpoint %s is already the address of endpoint %s of network %s, which also has a host address (host link %s): the host routes one address through one host link; give this container another address (--ip), or use another subnet",
					pluginapi.ErrConflict, a, dockerid.Short(ep.ID), dockerid.Short(e.ID), dockerid.Short(o.ID), config.ShimName(o.ID))
			}
		}
		return nil
	})
}
