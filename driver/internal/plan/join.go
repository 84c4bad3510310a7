package plan

import (
	"net/netip"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// InterfaceName is libnetwork's name of the endpoint's interface: the
// link in the host namespace, and the container's name for it (DstName,
// honoured by current engines; engine 20.10 and 28 take DstPrefix+N).
type InterfaceName struct {
	SrcName   string
	DstName   string `json:",omitempty"`
	DstPrefix string
}

// JoinResponse is libnetwork's Join answer (go-plugins-helpers' lacks
// DstName).
type JoinResponse struct {
	InterfaceName         InterfaceName
	Gateway               string
	GatewayIPv6           string
	StaticRoutes          []*network.StaticRoute
	DisableGatewayService bool
}

// JoinAnswer tells libnetwork what to do with the link: its gateways for
// macvlan and ipvlan l2, connected default routes for ipvlan l3/l3s, none
// for internal networks.
func JoinAnswer(n record.Network, ep record.Endpoint) *JoinResponse {
	resp := &JoinResponse{
		InterfaceName:         InterfaceName{SrcName: ep.Link, DstPrefix: "eth"},
		DisableGatewayService: true,
	}
	if n.Internal {
		return resp
	}
	if ep.Lease != nil {
		leaseJoin(resp, ep.Lease)
		resp.GatewayIPv6 = gateway6(n, ep)
		return resp
	}
	if n.Type == kernel.KindIpvlan && n.Mode != "l2" {
		if ep.IPv4 != "" {
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: "0.0.0.0/0", RouteType: 1})
		}
		if ep.IPv6 != "" {
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: "::/0", RouteType: 1})
		}
		return resp
	}
	resp.Gateway = gatewayFor(ep.IPv4, n.IPv4)
	resp.GatewayIPv6 = gateway6(n, ep)
	return resp
}

// gateway6 is the endpoint's IPv6 gateway: its pool's, except where IPv6
// comes from the LAN (slaac, DHCPv6 leases), whose default route is the
// one the container's kernel takes from the router's advertisements.
func gateway6(n record.Network, ep record.Endpoint) string {
	if n.Config.IPv6Mode == config.IPv6SLAAC || config.Leases6(n.Config) {
		return ""
	}
	return gatewayFor(ep.IPv6, n.IPv6)
}

// gatewayFor returns the gateway of the pool holding addr; none when the
// endpoint has no address of that family (a default route through a
// gateway it cannot reach would fail the container).
func gatewayFor(addr string, pools []record.Pool) string {
	a, err := netip.ParsePrefix(addr)
	if err != nil {
		return ""
	}
	for _, p := range pools {
		sub, perr := netip.ParsePrefix(p.Subnet)
		if perr == nil && p.Gateway != "" && sub.Contains(a.Addr()) {
			return p.Gateway
		}
	}
	return ""
}

// leaseJoin fills a Join answer from the lease: the router as gateway
// (only inside the leased subnet: a gateway the container cannot reach
// fails its start) and the classless static routes.
func leaseJoin(resp *JoinResponse, l *record.Lease) {
	if l == nil {
		return
	}
	p, err := netip.ParsePrefix(l.Addr)
	if err != nil {
		return
	}
	router := l.Router
	for _, r := range l.Routes {
		// RFC 3442: with classless routes, the router option is ignored;
		// their default route, if any, is the gateway.
		router = ""
		if r.Dst == "0.0.0.0/0" {
			router = r.Gateway
			break
		}
	}
	if gw, err := netip.ParseAddr(router); err == nil && p.Masked().Contains(gw) {
		resp.Gateway = gw.String()
	}
	for _, r := range l.Routes {
		onLink := r.Gateway == "" || r.Gateway == "0.0.0.0"
		gw, gerr := netip.ParseAddr(r.Gateway)
		switch {
		case r.Dst == "0.0.0.0/0" && onLink && resp.Gateway == "":
			// An on-link default route: the container's default route is
			// its link.
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 1})
		case r.Dst == "0.0.0.0/0":
			continue // the gateway above
		case onLink:
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 1})
		case gerr != nil || !p.Masked().Contains(gw):
			continue // a next hop off the leased subnet: the container could not start with it
		default:
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 0, NextHop: r.Gateway})
		}
	}
}
