package plan

import (
	"net/netip"

	"github.com/underlay-net/underlay/store/record"
)

// EndpointV4 is an endpoint's IPv4 address, if it has one.
func EndpointV4(ep record.Endpoint) (netip.Addr, bool) {
	p, err := netip.ParsePrefix(ep.IPv4)
	return p.Addr(), err == nil
}
