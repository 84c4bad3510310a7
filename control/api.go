// Package control is underlay's operator interface: a small API on the
// plugin socket (under /underlay/v1/, apart from the plugin protocol) that
// reports the daemon's state and carries out doctor's repairs through the
// driver's and the IPAM's own locks and rules, and the client side of the
// `underlay ls` and `underlay doctor` commands.
package control

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/driver"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/ipam"
)

// Paths of the control API (POST, JSON).
const (
	PathState  = "/underlay/v1/state"
	PathRepair = "/underlay/v1/repair"
)

// State is the daemon's answer to PathState: the driver's state, the
// kernel's links and the IPAM's pools, read at one moment.
type State struct {
	Version string `json:"version"`
	driver.Inventory
	Pools []ipam.PoolState `json:"pools"`
}

// RepairRequest asks for one repair.
type RepairRequest struct {
	Action doctor.Action `json:"action"`
}

// RepairResponse says what the repair did.
type RepairResponse struct {
	Result string `json:"result"`
}

// Server answers the control API.
type Server struct {
	Driver  *driver.Driver
	IPAM    *ipam.IPAM
	Version string
	Log     *slog.Logger
}

// Register adds the control API's routes to the plugin socket's mux.
func (s *Server) Register(mux *http.ServeMux) {
	pluginapi.Route(mux, s.Log, PathState, func(ctx context.Context, _ *struct{}) (any, error) {
		return s.State(ctx)
	})
	pluginapi.Route(mux, s.Log, PathRepair, func(ctx context.Context, r *RepairRequest) (any, error) {
		res, err := s.Repair(ctx, r.Action)
		if err != nil {
			return nil, err
		}
		return RepairResponse{Result: res}, nil
	})
}

// State reads the daemon's state.
func (s *Server) State(ctx context.Context) (State, error) {
	inv, err := s.Driver.Inventory(ctx)
	if err != nil {
		return State{}, err
	}
	pools, err := s.IPAM.Pools(ctx)
	if err != nil {
		return State{}, err
	}
	return State{Version: s.Version, Inventory: inv, Pools: pools}, nil
}

// Repair carries out one of doctor's actions; each checks its finding
// again first.
func (s *Server) Repair(ctx context.Context, a doctor.Action) (string, error) {
	switch a.Op {
	case doctor.OpRemoveStale:
		return s.Driver.RemoveStaleNetwork(ctx, a.Network)
	case doctor.OpRecreate:
		return s.Driver.RecreateParent(ctx, a.Link)
	case doctor.OpDeleteOrphan:
		return s.Driver.DeleteOrphanLink(ctx, a.Link)
	case doctor.OpRollback:
		return s.Driver.RollbackExpired(ctx, a.Network)
	case doctor.OpForgetJoin:
		return s.Driver.ForgetOldJoin(ctx, a.Network, a.Endpoint)
	case doctor.OpReleasePool:
		return s.IPAM.ReleaseLeaked(ctx, a.Pool, s.Driver.StaleGrace())
	}
	return "", pluginapi.Invalidf("repair %q is not one underlay knows: use one doctor printed", a.Op)
}

// Input turns a state and Docker's view into the doctor's input.
func (st State) Input(docker *doctor.Docker) doctor.Input {
	in := doctor.Input{Now: st.Now, Boot: st.Boot, Mark: st.Mark, Grace: st.Grace,
		Networks: st.Networks, Endpoints: st.Endpoints, Owned: st.Owned, Links: st.Links, HostLinks: st.HostLinks, Docker: docker}
	for _, p := range st.Pools {
		in.Pools = append(in.Pools, p.IPAMPool)
	}
	return in
}
