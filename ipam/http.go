package ipam

import (
	"context"
	"net/http"
	"strings"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/underlay-net/underlay/internal/pluginapi"
)

// Register adds every /IpamDriver.* route to mux, with the request and
// response types of go-plugins-helpers.
func (m *IPAM) Register(mux *http.ServeMux) {
	route(m, mux, "GetCapabilities", func(context.Context, *struct{}) (any, error) {
		// libnetwork asks this (and the spaces) when it loads the IPAM,
		// before its first RequestPool: keep Docker's subnets fresh.
		m.known.Wanted()
		// The state is durable: Docker need not replay its requests after
		// a restart. MACs are not needed to pick addresses.
		// (go-plugins-helpers' type lacks RequiresRequestReplay.)
		return capabilities{RequiresMACAddress: false, RequiresRequestReplay: false}, nil
	})
	route(m, mux, "GetDefaultAddressSpaces", func(context.Context, *struct{}) (any, error) {
		m.known.Wanted()
		return &ipam.AddressSpacesResponse{LocalDefaultAddressSpace: LocalSpace, GlobalDefaultAddressSpace: GlobalSpace}, nil
	})
	route(m, mux, "RequestPool", func(ctx context.Context, r *ipam.RequestPoolRequest) (any, error) {
		p, err := m.RequestPool(ctx, r.AddressSpace, r.Pool, r.SubPool, r.Options, r.V6)
		if err != nil {
			return nil, err
		}
		resp := &ipam.RequestPoolResponse{PoolID: p.ID, Pool: p.Prefix, Data: map[string]string{}}
		if p.Gateway != "" {
			resp.Data[dataGateway] = p.Gateway + "/" + prefixLen(p.Prefix)
		}
		return resp, nil
	})
	route(m, mux, "ReleasePool", func(ctx context.Context, r *ipam.ReleasePoolRequest) (any, error) {
		return nil, m.ReleasePool(ctx, r.PoolID)
	})
	route(m, mux, "RequestAddress", func(ctx context.Context, r *ipam.RequestAddressRequest) (any, error) {
		a, err := m.RequestAddress(ctx, r.PoolID, r.Address, r.Options)
		if err != nil {
			return nil, err
		}
		return &ipam.RequestAddressResponse{Address: a.String(), Data: map[string]string{}}, nil
	})
	route(m, mux, "ReleaseAddress", func(ctx context.Context, r *ipam.ReleaseAddressRequest) (any, error) {
		return nil, m.ReleaseAddress(ctx, r.PoolID, r.Address)
	})
}

// capabilities is libnetwork's IPAM capability answer.
type capabilities struct {
	RequiresMACAddress    bool
	RequiresRequestReplay bool
}

func route[Req any](m *IPAM, mux *http.ServeMux, name string, fn func(context.Context, *Req) (any, error)) {
	pluginapi.Route(mux, m.log, "/IpamDriver."+name, fn)
}

func prefixLen(prefix string) string {
	_, bits, _ := strings.Cut(prefix, "/")
	return bits
}
