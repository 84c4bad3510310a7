package driver

import (
	"context"

	"github.com/docker/go-plugins-helpers/network"
)

// The swarm manager's calls (global scope) and the capabilities that make
// a network a swarm network.

// AllocateNetwork validates the driver options on the swarm manager
// (global scope) and answers them, so every node's CreateNetwork receives
// them: answering nothing would lose the parent.
func (d *Driver) AllocateNetwork(_ context.Context, req *network.AllocateNetworkRequest) (*network.AllocateNetworkResponse, error) {
	if req.NetworkID == "" {
		return nil, invalidf("AllocateNetwork without NetworkID")
	}
	o, err := parseOptions(req.Options)
	if err != nil {
		return nil, err
	}
	return &network.AllocateNetworkResponse{Options: o.Given}, nil
}

// FreeNetwork is the manager's counterpart of AllocateNetwork; underlay
// holds nothing for it.
func (d *Driver) FreeNetwork(_ context.Context, req *network.FreeNetworkRequest) error {
	if req.NetworkID == "" {
		return invalidf("FreeNetwork without NetworkID")
	}
	return nil
}

// GetCapabilities answers the configured scope; the links reach beyond the
// host, so connectivity is global, as for Docker's built-in drivers.
func (d *Driver) GetCapabilities(context.Context) *network.CapabilitiesResponse {
	return &network.CapabilitiesResponse{Scope: d.scope, ConnectivityScope: "global"}
}
