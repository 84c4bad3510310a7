package plan

import (
	"testing"

	"github.com/underlay-net/underlay/store/record"
)

func TestLeaseJoinAnswer(t *testing.T) {
	l := &record.Lease{Addr: "198.18.180.100/24", Router: "198.18.180.1",
		Routes: []record.LeaseRoute{{Dst: "198.18.190.0/24", Gateway: "198.18.180.254"}, {Dst: "0.0.0.0/0", Gateway: "198.18.180.2"}, {Dst: "198.18.181.0/24", Gateway: "0.0.0.0"}}}
	resp := &JoinResponse{}
	leaseJoin(resp, l)
	if resp.Gateway != "198.18.180.2" || len(resp.StaticRoutes) != 2 || resp.StaticRoutes[0].NextHop != "198.18.180.254" || resp.StaticRoutes[1].RouteType != 1 {
		t.Errorf("Join from a lease with classless routes: %+v %+v %+v", resp, resp.StaticRoutes[0], resp.StaticRoutes[1])
	}
	resp = &JoinResponse{}
	leaseJoin(resp, &record.Lease{Addr: "198.18.180.100/24", Router: "198.18.9.1"})
	if resp.Gateway != "" {
		t.Errorf("a router outside the leased subnet became the gateway %s", resp.Gateway)
	}
	resp = &JoinResponse{}
	leaseJoin(resp, &record.Lease{Addr: "198.18.180.100/24", Routes: []record.LeaseRoute{{Dst: "0.0.0.0/0", Gateway: "0.0.0.0"}, {Dst: "198.18.190.0/24", Gateway: "198.18.9.1"}}})
	if resp.Gateway != "" || len(resp.StaticRoutes) != 1 || resp.StaticRoutes[0].Destination != "0.0.0.0/0" || resp.StaticRoutes[0].RouteType != 1 {
		t.Errorf("an on-link default route and an off-link next hop: gateway %q routes %+v; want the connected default route only", resp.Gateway, resp.StaticRoutes)
	}
}

// With an IPv4 lease, the IPv6 gateway follows the network's IPv6: the
// static pool's gateway (a DHCP pool of the IPAM for IPv4, a static IPv6
// pool), none where IPv6 comes from the LAN (the IPAM's DHCPv6 pool).
func TestJoinAnswerIPv6BesideALease(t *testing.T) {
	n := record.Network{Type: "macvlan", IPv4: []record.Pool{{Subnet: "198.18.1.0/24", Gateway: "198.18.1.1"}}, IPv6: []record.Pool{{Subnet: "2001:db8:1::/64", Gateway: "2001:db8:1::1"}}}
	n.Config.DHCP.FromIPAM = true
	ep := record.Endpoint{Link: "ul1", IPv4: "198.18.1.120/24", IPv6: "2001:db8:1::120/64", Lease: &record.Lease{Addr: "198.18.1.120/24", Router: "198.18.1.1"}}
	if r := JoinAnswer(n, ep); r.Gateway != "198.18.1.1" || r.GatewayIPv6 != "2001:db8:1::1" {
		t.Errorf("static IPv6 beside a lease: gateways %q and %q, want the lease's router and the pool's", r.Gateway, r.GatewayIPv6)
	}
	n.Config.DHCP.FromIPAM6 = true
	if r := JoinAnswer(n, ep); r.GatewayIPv6 != "" {
		t.Errorf("IPv6 from the IPAM's DHCPv6 pool: gateway %q, want none (the router's advertisements)", r.GatewayIPv6)
	}
}
