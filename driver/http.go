package driver

import (
	"context"
	"net/http"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/pluginapi"
)

// Handler returns a handler of the remote driver protocol alone:
// /Plugin.Activate (NetworkDriver) and every /NetworkDriver.* route. The
// daemon serves the driver beside the IPAM driver on one mux (Register).
func (d *Driver) Handler() http.Handler {
	mux := pluginapi.NewMux("NetworkDriver")
	d.Register(mux)
	return mux
}

// Register adds every /NetworkDriver.* route to mux, with the request and
// response types of go-plugins-helpers. Errors are answered as
// {"Err": "..."} with pluginapi.Status's code; malformed requests with 400.
func (d *Driver) Register(mux *http.ServeMux) {
	route(d, mux, "GetCapabilities", func(ctx context.Context, _ *struct{}) (any, error) {
		return d.GetCapabilities(ctx), nil
	})
	route(d, mux, "GwAllocCheck", func(_ context.Context, r *config.GwAllocCheckRequest) (any, error) {
		return config.GwAllocCheck(r)
	})
	route(d, mux, "CreateNetwork", func(ctx context.Context, r *network.CreateNetworkRequest) (any, error) {
		return nil, d.CreateNetwork(ctx, r)
	})
	route(d, mux, "AllocateNetwork", func(_ context.Context, r *network.AllocateNetworkRequest) (any, error) {
		return config.AllocateNetwork(r)
	})
	route(d, mux, "DeleteNetwork", func(ctx context.Context, r *network.DeleteNetworkRequest) (any, error) {
		return nil, d.DeleteNetwork(ctx, r)
	})
	route(d, mux, "FreeNetwork", func(_ context.Context, r *network.FreeNetworkRequest) (any, error) {
		return nil, config.FreeNetwork(r)
	})
	route(d, mux, "CreateEndpoint", func(ctx context.Context, r *network.CreateEndpointRequest) (any, error) {
		return d.CreateEndpoint(ctx, r)
	})
	route(d, mux, "DeleteEndpoint", func(ctx context.Context, r *network.DeleteEndpointRequest) (any, error) {
		return nil, d.DeleteEndpoint(ctx, r)
	})
	route(d, mux, "EndpointOperInfo", func(ctx context.Context, r *network.InfoRequest) (any, error) {
		return d.EndpointInfo(ctx, r)
	})
	route(d, mux, "Join", func(ctx context.Context, r *network.JoinRequest) (any, error) {
		return d.Join(ctx, r)
	})
	route(d, mux, "Leave", func(ctx context.Context, r *network.LeaveRequest) (any, error) {
		return nil, d.Leave(ctx, r)
	})
	for _, name := range []string{"DiscoverNew", "DiscoverDelete"} {
		route(d, mux, name, func(context.Context, *network.DiscoveryNotification) (any, error) { return nil, nil })
	}
	route(d, mux, "ProgramExternalConnectivity", func(_ context.Context, r *network.ProgramExternalConnectivityRequest) (any, error) {
		return nil, requireIDs(r.NetworkID, r.EndpointID)
	})
	route(d, mux, "RevokeExternalConnectivity", func(_ context.Context, r *network.RevokeExternalConnectivityRequest) (any, error) {
		return nil, requireIDs(r.NetworkID, r.EndpointID)
	})
}

func requireIDs(netID, epID string) error {
	if netID == "" || epID == "" {
		return config.Invalidf("request without NetworkID or EndpointID")
	}
	return nil
}

func route[Req any](d *Driver, mux *http.ServeMux, name string, fn func(context.Context, *Req) (any, error)) {
	pluginapi.Route(mux, d.log, "/NetworkDriver."+name, fn)
}
