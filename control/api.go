// Package control is underlay's operator interface: a small API on the
// plugin socket (under /underlay/v1/, apart from the plugin protocol) that
// reports the daemon's state and carries out doctor's repairs through the
// driver's and the IPAM's own locks and rules, and the client side of the
// `underlay ls` and `underlay doctor` commands.
package control

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dockerapi"
	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/ipam"
)

// Paths of the control API: POST only (other methods are answered 405
// with Allow: POST), JSON bodies.
const (
	PathState  = "/underlay/v1/state"
	PathRepair = "/underlay/v1/repair"
)

// State is the daemon's answer to PathState: the driver's state, the
// kernel's links and the IPAM's pools, read at one moment.
type State struct {
	Version string `json:"version"`
	doctor.Inventory
	Pools []ipam.PoolState `json:"pools"`
	// Names are the IPAM's sticky addresses by endpoint name.
	Names []ipam.NameState `json:"names"`
}

// RepairRequest asks for one repair: one of doctor's actions, its IDs
// under the names the request log and metrics know.
type RepairRequest struct {
	Op         doctor.Op `json:"Op"`
	NetworkID  string    `json:"NetworkID,omitempty"`
	EndpointID string    `json:"EndpointID,omitempty"`
	PoolID     string    `json:"PoolID,omitempty"`
	Link       string    `json:"Link,omitempty"`
}

func repairRequest(a doctor.Action) RepairRequest {
	return RepairRequest{Op: a.Op, NetworkID: a.Network, EndpointID: a.Endpoint, PoolID: a.Pool, Link: a.Link}
}

func (r RepairRequest) action() doctor.Action {
	return doctor.Action{Op: r.Op, Network: r.NetworkID, Endpoint: r.EndpointID, Pool: r.PoolID, Link: r.Link}
}

// RepairResponse says what the repair did.
type RepairResponse struct {
	Result string `json:"result"`
}

// Driver is what the control API needs of the network driver
// (*driver.Driver): its inventory and doctor's repairs, each of which
// checks its finding again under the driver's locks.
type Driver interface {
	Inventory(ctx context.Context) (doctor.Inventory, error)
	RemoveStaleNetwork(ctx context.Context, id string) (string, error)
	RecreateParent(ctx context.Context, name string) (string, error)
	DeleteOrphanLink(ctx context.Context, name string) (string, error)
	HealLink(ctx context.Context, name string) (string, error)
	RollbackExpired(ctx context.Context, id string) (string, error)
	// CreateWindow is the longest a create may take from its pool to its
	// commit.
	CreateWindow() time.Duration
}

// Server answers the control API.
type Server struct {
	Driver Driver
	IPAM   *ipam.IPAM
	// Docker is the daemon's own Docker API, asked again before a pool is
	// released; nil refuses such releases.
	Docker  *dockerapi.Client
	Version string
	Log     *slog.Logger
}

// Register adds the control API's routes to the plugin socket's mux.
// Only POST reaches them: any other method is answered 405 with an Allow
// header, before the request is decoded or counted.
func (s *Server) Register(mux *http.ServeMux) {
	routes := http.NewServeMux()
	pluginapi.Route(routes, s.Log, PathState, func(ctx context.Context, _ *struct{}) (any, error) {
		return s.State(ctx)
	})
	pluginapi.Route(routes, s.Log, PathRepair, func(ctx context.Context, r *RepairRequest) (any, error) {
		res, err := s.Repair(ctx, r.action())
		if err != nil {
			return nil, err
		}
		return RepairResponse{Result: res}, nil
	})
	for _, p := range []string{PathState, PathRepair} {
		mux.Handle(p, postOnly(routes))
	}
}

// postOnly answers every method but POST with 405, naming the method, the
// path and what to use.
func postOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			pluginapi.WriteJSON(w, http.StatusMethodNotAllowed, pluginapi.ErrorResponse{
				Err: fmt.Sprintf("%s %s: the control API answers POST only (a JSON body, {} when empty): use POST", r.Method, r.URL.Path)})
			return
		}
		h.ServeHTTP(w, r)
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
	names, err := s.IPAM.Names(ctx)
	if err != nil {
		return State{}, err
	}
	return State{Version: s.Version, Inventory: inv, Pools: pools, Names: names}, nil
}

// Repair carries out one of doctor's actions; each checks its finding
// again first.
func (s *Server) Repair(ctx context.Context, a doctor.Action) (string, error) {
	need := map[doctor.Op][2]string{
		doctor.OpRemoveStale: {a.Network, "NetworkID"}, doctor.OpRollback: {a.Network, "NetworkID"},
		doctor.OpRecreate: {a.Link, "Link"}, doctor.OpDeleteOrphan: {a.Link, "Link"}, doctor.OpReleasePool: {a.Pool, "PoolID"},
		doctor.OpHeal: {a.Link, "Link"},
	}
	if f, ok := need[a.Op]; ok && f[0] == "" {
		return "", pluginapi.Invalidf("repair %s needs %s: give the one doctor printed", a.Op, f[1])
	}
	switch a.Op {
	case doctor.OpRemoveStale:
		return s.Driver.RemoveStaleNetwork(ctx, a.Network)
	case doctor.OpRecreate:
		return s.Driver.RecreateParent(ctx, a.Link)
	case doctor.OpDeleteOrphan:
		return s.Driver.DeleteOrphanLink(ctx, a.Link)
	case doctor.OpHeal:
		return s.Driver.HealLink(ctx, a.Link)
	case doctor.OpRollback:
		return s.Driver.RollbackExpired(ctx, a.Network)
	case doctor.OpReleasePool:
		subnets, err := s.dockerSubnets(ctx)
		if err != nil {
			return "", err
		}
		return s.IPAM.ReleaseLeaked(ctx, a.Pool, s.Driver.CreateWindow(), subnets)
	}
	return "", pluginapi.Invalidf("repair %q is not one underlay knows: use one doctor printed", a.Op)
}

// dockerSubnets lists the subnets of every network the daemon's Docker
// has; a pool is released only when Docker could be asked.
func (s *Server) dockerSubnets(ctx context.Context) ([]netip.Prefix, error) {
	if s.Docker == nil {
		return nil, fmt.Errorf("%w: this daemon has no Docker API to check that no network uses the pool: not released", pluginapi.ErrConflict)
	}
	nets, err := s.Docker.Networks(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: the daemon's Docker could not be asked whether a network uses the pool (%v): not released", pluginapi.ErrConflict, err)
	}
	return subnetsOf(nets), nil
}

// subnetsOf parses Docker's subnets (as users typed them) into prefixes.
func subnetsOf(nets []dockerapi.Network) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nets {
		for _, sub := range n.Subnets {
			if p, err := netip.ParsePrefix(sub); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}

// Input turns a state and Docker's view into the doctor's input.
func (st State) Input(docker *doctor.Docker) doctor.Input {
	in := doctor.Input{Now: st.Now, Boot: st.Boot, Mark: st.Mark, Grace: st.Grace, PoolGrace: st.PoolGrace,
		Networks: st.Networks, Endpoints: st.Endpoints, Owned: st.Owned, Links: st.Links, HostLinks: st.HostLinks, HostLinkAddrs: st.HostLinkAddrs, LAN: st.LAN, Docker: docker}
	for _, p := range st.Pools {
		in.Pools = append(in.Pools, p.IPAMPool)
	}
	return in
}
