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
