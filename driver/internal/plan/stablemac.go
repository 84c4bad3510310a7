package plan

import (
	"net/netip"

	"github.com/underlay-net/underlay/store/record"
)

// FirstAddr is the endpoint's IPv4 address, else its IPv6 one.
func FirstAddr(ep record.Endpoint) netip.Addr {
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(a); err == nil {
			return p.Addr()
		}
	}
	return netip.Addr{}
}
