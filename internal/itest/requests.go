package itest

import (
	"strings"
	"sync"

	"github.com/docker/go-plugins-helpers/network"
)

// Net describes a CreateNetwork request.
type Net struct {
	ID   string
	Opts map[string]string
	// V4 and V6 are pools as "subnet" or "subnet,gateway-cidr".
	V4, V6   []string
	Internal bool
	// Space is the pools' address space ("LocalDefault", Docker's IPAM,
	// when empty; LocalSpace for underlay's).
	Space string
	// AuxV4 are the aux addresses (docker network create --aux-address
	// name=ADDR) of the pools in V4, by position: AuxV4[i] belongs to V4[i],
	// name to address in CIDR form with the pool's mask, as libnetwork
	// sends them ("198.18.1.2/24").
	AuxV4 []map[string]string
}

// Request returns the CreateNetwork request as libnetwork sends it.
func (n Net) Request() *network.CreateNetworkRequest {
	generic := map[string]any{}
	for k, v := range n.Opts {
		generic[k] = v
	}
	req := &network.CreateNetworkRequest{NetworkID: n.ID, Options: map[string]any{"com.docker.network.generic": generic}}
	if n.Internal {
		req.Options["com.docker.network.internal"] = true
	}
	req.IPv4Data = pools(n.V4, n.Space)
	for i, aux := range n.AuxV4 {
		if i < len(req.IPv4Data) && len(aux) > 0 {
			req.IPv4Data[i].AuxAddresses = map[string]any{}
			for k, v := range aux {
				req.IPv4Data[i].AuxAddresses[k] = v
			}
		}
	}
	if len(n.V6) > 0 {
		req.Options["com.docker.network.enable_ipv6"] = true
		req.IPv6Data = pools(n.V6, n.Space)
	}
	return req
}

func pools(specs []string, space string) []*network.IPAMData {
	if space == "" {
		space = "LocalDefault"
	}
	var out []*network.IPAMData
	for _, s := range specs {
		sub, gw, _ := strings.Cut(s, ",")
		out = append(out, &network.IPAMData{AddressSpace: space, Pool: sub, Gateway: gw})
	}
	return out
}

// CreateNetwork sends the request and returns the protocol error ("" on
// success).
func (d *Daemon) CreateNetwork(n Net) string {
	d.t.Helper()
	return d.Call("CreateNetwork", n.Request(), nil)
}

// MustCreateNetwork fails the test unless the network is created.
func (d *Daemon) MustCreateNetwork(n Net) {
	d.t.Helper()
	if msg := d.CreateNetwork(n); msg != "" {
		d.t.Fatalf("CreateNetwork %s: %s", n.ID, msg)
	}
}

// DeleteNetwork deletes a network and fails the test on an error.
func (d *Daemon) DeleteNetwork(id string) {
	d.t.Helper()
	d.MustCall("DeleteNetwork", network.DeleteNetworkRequest{NetworkID: id}, nil)
}

// Endpoint creates and joins an endpoint; it returns the CreateEndpoint
// and Join answers.
func (d *Daemon) Endpoint(netID, epID, addr, addr6, mac string) (network.CreateEndpointResponse, network.JoinResponse) {
	d.t.Helper()
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID,
		Interface: &network.EndpointInterface{Address: addr, AddressIPv6: addr6, MacAddress: mac}}, &ce)
	var j network.JoinResponse
	d.MustCall("Join", network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/test"}, &j)
	return ce, j
}

// RemoveEndpoint leaves and deletes an endpoint.
func (d *Daemon) RemoveEndpoint(netID, epID string) {
	d.t.Helper()
	d.MustCall("Leave", network.LeaveRequest{NetworkID: netID, EndpointID: epID}, nil)
	d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: epID}, nil)
}

// Concurrently runs fn(0..n-1) at once and returns what each returned.
func Concurrently(n int, fn func(i int) string) []string {
	out := make([]string, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = fn(i)
		}(i)
	}
	wg.Wait()
	return out
}
