package config

import (
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// The swarm manager's calls (global scope) and the gateway check current
// engines make before CreateNetwork: answers that are functions of the
// request alone.

// AllocateNetwork validates the driver options on the swarm manager
// (global scope) and answers them, so every node's CreateNetwork receives
// them: answering nothing would lose the parent.
func AllocateNetwork(req *network.AllocateNetworkRequest) (*network.AllocateNetworkResponse, error) {
	if req.NetworkID == "" {
		return nil, Invalidf("AllocateNetwork without NetworkID")
	}
	o, err := ParseOptions(req.Options)
	if err != nil {
		return nil, err
	}
	return &network.AllocateNetworkResponse{Options: o.Given}, nil
}

// FreeNetwork is the manager's counterpart of AllocateNetwork; underlay
// holds nothing for it.
func FreeNetwork(req *network.FreeNetworkRequest) error {
	if req.NetworkID == "" {
		return Invalidf("FreeNetwork without NetworkID")
	}
	return nil
}

// GwAllocCheckRequest and GwAllocCheckResponse are libnetwork's
// (remote/api GwAllocCheckerRequest, GwAllocCheckerResponse).
type GwAllocCheckRequest struct {
	// Options are CreateNetwork's, of the network about to be created.
	Options map[string]any
}

// GwAllocCheckResponse says which gateway addresses Docker's IPAM should
// not reserve.
type GwAllocCheckResponse struct {
	SkipIPv4, SkipIPv6 bool
}

// GwAllocCheck tells Docker not to reserve a gateway address where
// underlay uses none and nothing else can hold it: networks without a
// parent (a dummy link of their own) and ipvlan l3/l3s (connected default
// routes, the host routes). macvlan and ipvlan l2 networks use the LAN's
// router as the gateway, and an --internal network with a parent is on the
// LAN too: their gateway address stays reserved, so that no container is
// given a router's address. A gateway the user gives (--gateway) is
// Docker's to keep whatever the answer.
func GwAllocCheck(req *GwAllocCheckRequest) (*GwAllocCheckResponse, error) {
	generic, err := GenericOptions(req.Options)
	if err != nil {
		return nil, err
	}
	o, err := ParseOptions(generic)
	if err != nil {
		return nil, err
	}
	if _, err := BoolOption(req.Options, LabelInternal); err != nil {
		return nil, err
	}
	// An internal network with a parent is on the LAN all the same: its
	// subnet's gateway address may be a router there, which no container
	// must be given.
	skip := o.Parent == "" || (o.Type == kernel.KindIpvlan && o.Mode != kernel.IpvlanL2)
	return &GwAllocCheckResponse{SkipIPv4: skip, SkipIPv6: skip}, nil
}
