package driver

import (
	"context"
	"net"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store/record"
)

// IPv6 from the LAN (-o ipv6_mode=slaac|dhcpv6, driver/internal/config
// ipv6.go): CreateEndpoint answers the endpoint's IPv6 address, which
// Docker configures on the container's interface and which keeps IPv6
// on there (the engines disable it on an interface given none):
//   - slaac: the endpoint's link-local address; the container's kernel
//     forms its global addresses and default route from the LAN's router
//     advertisements, and follows prefix changes, by itself (with Docker's
//     IPAM the address Docker gave from the network's IPv6 pool instead,
//     which keeps IPv6 on as well);
//   - dhcpv6: an address leased from the LAN's DHCPv6 server
//     (driver/internal/leases, as DHCP's), /128 as DHCPv6 gives no prefix length
//     (the on-link prefix and the default route come from the router
//     advertisements); renewed while the endpoint exists, released when
//     it goes.

// lanIPv6 is the address source of networks whose IPv6 comes from the
// LAN: it sets ep.IPv6 (and ep.Lease6, through leased) and answers it.
func (d *Driver) lanIPv6(ctx context.Context, n record.Network, ep *record.Endpoint, existing *record.Endpoint) (grant, error) {
	mode := n.Config.IPv6Mode
	if mode != config.IPv6SLAAC && mode != config.IPv6DHCPv6 { // static
		return grant{}, nil
	}
	if mode == config.IPv6SLAAC && len(n.IPv6) > 0 {
		// Docker's IPAM gave the network an IPv6 pool and the endpoint an
		// address of it, which stays; the container's kernel forms the
		// LAN's addresses beside it.
		return grant{}, nil
	}
	if ep.IPv6 != "" {
		return grant{}, config.Invalidf("endpoint %s of network %s comes with IPv6 address %s, but the network takes IPv6 from the LAN (ipv6_mode=%s): run containers without --ip6", dockerid.Short(ep.ID), dockerid.Short(n.ID), ep.IPv6, mode)
	}
	if mode != config.IPv6SLAAC {
		return leased(ctx, d, d.leases.V6, n, ep, existing, true)
	}
	mac, err := net.ParseMAC(ep.MAC)
	addr, ok := plan.SLAACAddress(mac)
	if err != nil || !ok {
		return grant{}, config.Invalidf("endpoint %s of ipv6_mode=slaac network %s has no MAC of its own (%q): use a macvlan network", dockerid.Short(ep.ID), dockerid.Short(n.ID), ep.MAC)
	}
	ep.IPv6 = addr
	// The link-local address is the container's own on the parent's
	// LAN: the host's link-local of the parent, or another endpoint's,
	// would be a duplicate no probe sees (addrheld.go).
	unclaim, err := claimAddrs(ctx, d.links, d.store, &d.claims, n, *ep, plan.EndpointAddrs(record.Endpoint{IPv6: addr}))
	if err != nil {
		return grant{}, err
	}
	return grant{unclaim: unclaim, answer: func(a *network.EndpointInterface) { a.AddressIPv6 = ep.IPv6 }}, nil
}
