package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/store"
)

// Addresses from the LAN's DHCP server (-o dhcp=true, with Docker's null
// IPAM): CreateEndpoint leases an address for the endpoint and answers it,
// Join answers the lease's router and classless routes, DeleteEndpoint
// releases it, and leases.go renews it for as long as the endpoint exists.
// The lease client (LeaseClient) works from the host namespace on the
// parent link; the lease is part of the endpoint's record.

// Driver options of DHCP networks.
const (
	OptDHCP        = "dhcp"
	OptDHCPTimeout = "dhcp_timeout"
)

// defaultDHCPTimeout is how long CreateEndpoint waits for a lease;
// maxDHCPTimeout stays under the 30 s dockerd waits for a plugin's answer
// (the managed plugin's default `docker plugin enable --timeout`).
const (
	defaultDHCPTimeout = 10 * time.Second
	minDHCPTimeout     = time.Second
	maxDHCPTimeout     = 25 * time.Second
)

// LeaseRequest says for whom a lease is.
type LeaseRequest struct {
	// Parent is the link the server is reached on.
	Parent string
	// MAC is the client hardware address: the endpoint's MAC (macvlan) or
	// the parent's (ipvlan).
	MAC net.HardwareAddr
	// ClientID is option 61, unique and stable per endpoint; set for
	// ipvlan endpoints, which share the parent's MAC.
	ClientID []byte
	// Address is the address to ask for again (after a NAK or a restart).
	Address netip.Addr
	// Only, when valid, is the one address Acquire may take: an offer of
	// another is not requested (winning a lost lease back: the container
	// cannot be given another address).
	Only netip.Addr
}

// LeaseClient talks DHCP for endpoints.
type LeaseClient interface {
	// Acquire runs DISCOVER/OFFER/REQUEST/ACK.
	Acquire(ctx context.Context, r LeaseRequest) (store.Lease, error)
	// Renew extends a lease; an error wrapping ErrLeaseNAK means the
	// server refused it.
	Renew(ctx context.Context, r LeaseRequest, l store.Lease) (store.Lease, error)
	// Release gives a lease back.
	Release(ctx context.Context, r LeaseRequest, l store.Lease) error
	// Decline tells the server an offered address is in use (DHCPDECLINE).
	Decline(ctx context.Context, r LeaseRequest, l store.Lease) error
}

// ErrLeaseNAK is wrapped by LeaseClient errors for a server's DHCPNAK.
var ErrLeaseNAK = errors.New("the DHCP server refused the lease (DHCPNAK)")

// dhcpConfig is a network's DHCP configuration.
type dhcpConfig struct {
	On      bool
	Timeout time.Duration
}

// parseDHCP validates the DHCP options (syntax only).
func parseDHCP(opts map[string]string) (dhcpConfig, error) {
	c := dhcpConfig{Timeout: defaultDHCPTimeout}
	if v, ok := opts[OptDHCP]; ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return c, invalidf("dhcp %q is not a boolean: use -o dhcp=true", v)
		}
		c.On = on
	}
	if v, ok := opts[OptDHCPTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < minDHCPTimeout || d > maxDHCPTimeout {
			return c, invalidf("dhcp_timeout %q is not a duration from %s to %s (a DHCP exchange takes a round trip or more; Docker gives up on a plugin's answer after 30 s by default: docker plugin enable --timeout): use for example -o dhcp_timeout=10s", v, minDHCPTimeout, maxDHCPTimeout)
		}
		if !c.On {
			return c, invalidf("dhcp_timeout=%s applies only with -o dhcp=true: drop it, or add dhcp=true", v)
		}
		c.Timeout = d
	}
	return c, nil
}

// dhcpOf is a stored network's DHCP configuration.
func dhcpOf(n store.Network) dhcpConfig {
	c, _ := parseDHCP(n.Options) // validated at CreateNetwork
	return c
}

// nullPool reports whether IPv4 data is Docker's null IPAM's: one pool
// 0.0.0.0/0 in the address space "null".
func nullPool(data []*network.IPAMData) bool {
	return len(data) == 1 && data[0] != nil && data[0].AddressSpace == "null" && data[0].Pool == "0.0.0.0/0"
}

// checkDHCPNetwork refuses what a DHCP network cannot be.
func checkDHCPNetwork(c dhcpConfig, req *network.CreateNetworkRequest, o netOptions, internal bool) error {
	switch {
	case !c.On:
		return nil
	case !nullPool(req.IPv4Data):
		pool := "none"
		if len(req.IPv4Data) > 0 && req.IPv4Data[0] != nil {
			pool = req.IPv4Data[0].Pool
		}
		return invalidf("dhcp=true takes the addresses from the LAN's DHCP server, but Docker's IPAM gave the network pool %s: create it with --ipam-driver null (and no --subnet)", pool)
	case len(req.IPv6Data) > 0:
		return invalidf("dhcp=true leases IPv4 addresses only: drop --ipv6")
	case o.Type == typeIpvlan && o.Mode != "l2":
		return invalidf("dhcp=true needs ipvlan_mode=l2: in %s mode the host routes for the containers, and the LAN's DHCP server and router do not see them", o.Mode)
	case internal || o.Parent == "":
		return invalidf("dhcp=true needs a parent on the LAN with the DHCP server: give -o parent=IFACE, and do not make the network --internal")
	case o.Given[OptHostAddress] != "":
		return invalidf("host_address needs the network's subnet, which a dhcp=true network learns only per lease: drop host_address")
	}
	return nil
}

// leaseRequest is the request for an endpoint's lease.
func (d *Driver) leaseRequest(ctx context.Context, n store.Network, ep store.Endpoint) (LeaseRequest, error) {
	r := LeaseRequest{Parent: n.Parent}
	if n.Type == typeIpvlan {
		l, err := d.links.Get(ctx, n.Parent)
		if err != nil {
			return r, fmt.Errorf("parent %s of DHCP network %s: %w", n.Parent, short(n.ID), err)
		}
		if r.MAC, err = net.ParseMAC(l.MAC); err != nil {
			return r, fmt.Errorf("parent %s has no usable MAC %q for DHCP: %w", n.Parent, l.MAC, err)
		}
		// Type 0 (not a hardware address), then a name of the endpoint's:
		// the same endpoint asks with the same ID after a restart.
		r.ClientID = append([]byte{0}, "underlay-"+ep.ID...)
	} else {
		var err error
		if r.MAC, err = net.ParseMAC(ep.MAC); err != nil {
			return r, fmt.Errorf("endpoint %s has no usable MAC %q for DHCP: %w", short(ep.ID), ep.MAC, err)
		}
	}
	if ep.Lease != nil {
		if p, err := netip.ParsePrefix(ep.Lease.Addr); err == nil {
			r.Address = p.Addr()
		}
	}
	return r, nil
}

// acquireLease leases an address for a new endpoint of a DHCP network,
// within the network's dhcp_timeout. An offer that is not free is
// declined (DHCPDECLINE) and another asked for, up to maxDeclines times:
// one another create in flight is taking, one another endpoint of this
// daemon on the parent holds, one a host on the LAN answers a probe for.
// unclaim ends the claim on the address; call it once the endpoint is
// recorded (or not).
func (d *Driver) acquireLease(ctx context.Context, n store.Network, ep store.Endpoint) (l store.Lease, unclaim func(), err error) {
	unclaim = func() {}
	if d.dhcp == nil {
		return store.Lease{}, unclaim, fmt.Errorf("network %s has dhcp=true but this daemon has no DHCP client", short(n.ID))
	}
	r, err := d.leaseRequest(ctx, n, ep)
	if err != nil {
		return store.Lease{}, unclaim, err
	}
	c := dhcpOf(n)
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	budget := d.probeBudget(ctx, n)
	var declined []string
	for {
		l, err = d.dhcp.Acquire(ctx, r)
		if err != nil {
			if len(declined) > 0 {
				err = fmt.Errorf("%w (after declining %s)", err, strings.Join(declined, "; "))
			}
			return store.Lease{}, unclaim, fmt.Errorf("endpoint %s of network %s: no lease from a DHCP server on %s within dhcp_timeout %s: %w", short(ep.ID), short(n.ID), n.Parent, c.Timeout, err)
		}
		addr := leaseAddr(l)
		why := ""
		claimed := d.claims.claim(n.Parent, addr, ep.ID)
		if !claimed {
			why = "another endpoint being created was offered it too"
		} else if why, err = d.heldElsewhere(n, ep, addr); err != nil {
			d.claims.release(n.Parent, addr, ep.ID)
			return store.Lease{}, unclaim, err
		} else if why == "" {
			if perr := d.probeAddr(ctx, n, ep, addr, budget); perr != nil {
				why = perr.Error()
			}
		}
		if why == "" {
			d.log.Info("leased address", "network", n.ID, "endpoint", ep.ID, "address", l.Addr, "router", l.Router, "server", l.ServerID, "expiry", l.Expiry)
			return l, func() { d.claims.release(n.Parent, addr, ep.ID) }, nil
		}
		if claimed {
			d.claims.release(n.Parent, addr, ep.ID)
		}
		declined = append(declined, fmt.Sprintf("%s: %s", addr, why))
		d.log.Warn("declined a DHCP offer that is not free", "network", n.ID, "endpoint", ep.ID, "address", addr, "why", why)
		if derr := d.dhcp.Decline(context.WithoutCancel(ctx), r, l); derr != nil {
			d.log.Warn("could not send DHCPDECLINE", "address", addr, "error", derr)
		}
		if len(declined) >= maxDeclines {
			return store.Lease{}, unclaim, fmt.Errorf("%w: endpoint %s of network %s: the DHCP server on %s offered only addresses that are not free, each declined: %s; free them on the LAN or on the server (its lease table), or widen its pool",
				ErrConflict, short(ep.ID), short(n.ID), n.Parent, strings.Join(declined, "; "))
		}
	}
}

// releaseLease gives an endpoint's lease back, best effort; false when it
// could not.
func (d *Driver) releaseLease(ctx context.Context, n store.Network, ep store.Endpoint) bool {
	if d.dhcp == nil || ep.Lease == nil {
		return false
	}
	r, err := d.leaseRequest(ctx, n, ep)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, dhcpOf(n).Timeout)
		err = d.dhcp.Release(ctx, r, *ep.Lease)
		cancel()
	}
	if err != nil {
		d.log.Warn("could not release DHCP lease: the next start tries again; the server frees it when it expires", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr, "error", err)
		return false
	}
	d.log.Info("released DHCP lease", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr)
	return true
}

// leaseJoin fills a Join answer from the lease: the router as gateway
// (only inside the leased subnet: a gateway the container cannot reach
// fails its start) and the classless static routes.
func leaseJoin(resp *JoinResponse, l *store.Lease) {
	if l == nil {
		return
	}
	p, err := netip.ParsePrefix(l.Addr)
	if err != nil {
		return
	}
	router := l.Router
	for _, r := range l.Routes {
		// RFC 3442: with classless routes, the router option is ignored;
		// their default route, if any, is the gateway.
		router = ""
		if r.Dst == "0.0.0.0/0" {
			router = r.Gateway
			break
		}
	}
	if gw, err := netip.ParseAddr(router); err == nil && p.Masked().Contains(gw) {
		resp.Gateway = gw.String()
	}
	for _, r := range l.Routes {
		onLink := r.Gateway == "" || r.Gateway == "0.0.0.0"
		gw, gerr := netip.ParseAddr(r.Gateway)
		switch {
		case r.Dst == "0.0.0.0/0" && onLink && resp.Gateway == "":
			// An on-link default route: the container's default route is
			// its link.
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 1})
		case r.Dst == "0.0.0.0/0":
			continue // the gateway above
		case onLink:
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 1})
		case gerr != nil || !p.Masked().Contains(gw):
			continue // a next hop off the leased subnet: the container could not start with it
		default:
			resp.StaticRoutes = append(resp.StaticRoutes, &network.StaticRoute{Destination: r.Dst, RouteType: 0, NextHop: r.Gateway})
		}
	}
}
