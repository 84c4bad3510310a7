package driver

import (
	"context"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The one contract of an endpoint's address sources (static, DHCP,
// SLAAC, DHCPv6: addrheld.go, dhcp.go, ipv6.go): each gives CreateEndpoint
// a grant, and CreateEndpoint (endpoint.go) carries out the grants
// together: undone when the endpoint is not recorded, committed with it,
// started after, and answered.

// grant is what an address source gave an endpoint being created; each
// part may be nil.
type grant struct {
	// undo gives the address back: the endpoint is not recorded.
	undo func()
	// unclaim ends the claims on the address; call it once the endpoint
	// is recorded, or not.
	unclaim func()
	// commit is the source's part of the endpoint's commit (its lease's
	// journal entry goes: the record holds the lease).
	commit func(*store.Tx) error
	// start runs once the endpoint is recorded (the lease's renewals).
	start func()
	// answer sets what CreateEndpoint answers of the address.
	answer func(*network.EndpointInterface)
}

// addrSource gives an endpoint being created its addresses of one
// source, in ep: static (staticAddrs), DHCP (dhcpAddr), SLAAC or DHCPv6
// (lanIPv6). On error it leaves nothing to undo (but may leave claims).
type addrSource func(ctx context.Context, n record.Network, ep *record.Endpoint, existing *record.Endpoint) (grant, error)

// grants are the grants of an endpoint's sources, in order.
type grants []grant

func (gs grants) undo() {
	for i := len(gs) - 1; i >= 0; i-- {
		if gs[i].undo != nil {
			gs[i].undo()
		}
	}
}

func (gs grants) unclaim() {
	for _, g := range gs {
		if g.unclaim != nil {
			g.unclaim()
		}
	}
}

func (gs grants) commit(tx *store.Tx) error {
	for _, g := range gs {
		if g.commit != nil {
			if err := g.commit(tx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (gs grants) start() {
	for _, g := range gs {
		if g.start != nil {
			g.start()
		}
	}
}

// answer is CreateEndpoint's answer: the MAC this daemon chose, and the
// addresses the sources answer.
func (gs grants) answer(ep record.Endpoint, generated bool) *network.CreateEndpointResponse {
	answer := &network.EndpointInterface{}
	if generated {
		answer.MacAddress = ep.MAC
	}
	for _, g := range gs {
		if g.answer != nil {
			g.answer(answer)
		}
	}
	if *answer == (network.EndpointInterface{}) {
		return &network.CreateEndpointResponse{}
	}
	return &network.CreateEndpointResponse{Interface: answer}
}
