package config

import (
	"github.com/docker/go-plugins-helpers/network"
)

// ipamRef names a pool by the IPAM address space it came from.
type IPAMRef struct{ Space, Pool string }

// ipamRefs lists the request's pools with their address spaces.
func IPAMRefs(req *network.CreateNetworkRequest) []IPAMRef {
	var out []IPAMRef
	for _, d := range append(append([]*network.IPAMData{}, req.IPv4Data...), req.IPv6Data...) {
		if d != nil {
			out = append(out, IPAMRef{Space: d.AddressSpace, Pool: d.Pool})
		}
	}
	return out
}
