package lan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store/record"
)

// Addresses someone else answers for: before CreateEndpoint answers, the
// endpoint's addresses are probed on the parent (ARP probes from 0.0.0.0,
// RFC 5227 2.1.1; a DAD-style Neighbour Solicitation from :: for IPv6)
// from the endpoint's MAC (the parent's for ipvlan). A DHCP offer that
// another host answers for, or that another endpoint of this daemon holds,
// is declined (DHCPDECLINE) and another one asked for; a static address is
// refused naming the MAC that answered.

// Budget is a network's probe budget: address_probe when given; else on
// (probeopt.Default) for DHCP and DHCPv6 networks and for networks whose subnet is
// the LAN the host itself is on (a connected route of the parent holds
// it), where a host that is not Docker's may hold an address; off
// otherwise.
func (l *LAN) Budget(ctx context.Context, n record.Network) time.Duration {
	if p := n.Config.Probe; p.Given {
		return p.Budget
	}
	if n.Config.DHCP.Leases() || config.Leases6(n.Config) {
		return probeopt.Default
	}
	if l.Routes == nil || len(n.IPv4)+len(n.IPv6) == 0 || n.Internal {
		return 0
	}
	p, err := l.Links.LinkByName(ctx, n.Parent)
	if err != nil {
		return 0
	}
	routes, err := l.Routes.RoutesVia(ctx, p.Index)
	if err != nil {
		return 0
	}
	for _, r := range routes {
		if !r.Connected() || r.LinkIndex != p.Index {
			continue
		}
		for _, pool := range append(append([]record.Pool{}, n.IPv4...), n.IPv6...) {
			if sub, err := netip.ParsePrefix(pool.Subnet); err == nil && sub.Overlaps(r.Dst) {
				return probeopt.Default
			}
		}
	}
	return 0
}

// Probe probes one address; a conflict is returned, any other failure
// (no raw socket) is logged and the address taken.
func (l *LAN) Probe(ctx context.Context, n record.Network, ep record.Endpoint, addr netip.Addr, budget time.Duration) error {
	if l.Prober == nil || budget == 0 || !addr.IsValid() {
		return nil
	}
	mac, err := l.MAC(ctx, n, ep)
	if err == nil {
		if addr.Is4() {
			err = l.Prober.Probe(ctx, n.Parent, mac, addr, budget)
		} else {
			err = l.Prober.ProbeIPv6(ctx, n.Parent, mac, addr, budget)
		}
	}
	if err == nil || errors.Is(err, probe.ErrConflict) {
		return err
	}
	l.Log.Warn("could not probe an endpoint's address; taking it unprobed", "network", n.ID, "endpoint", ep.ID, "address", addr, "error", err)
	return nil
}

// ProbeStatic refuses an endpoint whose static or IPAM-given address a
// host on the LAN answers for (an error wrapping pluginapi.ErrConflict).
func (l *LAN) ProbeStatic(ctx context.Context, n record.Network, ep record.Endpoint) error {
	budget := l.Budget(ctx, n)
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		if err := l.Probe(ctx, n, ep, p.Addr(), budget); err != nil {
			return fmt.Errorf("%w: endpoint %s: %w: run the container with another --ip, or keep %s out of Docker's addresses with --aux-address or --ip-range (docker network create); or switch the probe off with -o address_probe=0", pluginapi.ErrConflict, dockerid.Short(ep.ID), err, p.Addr())
		}
	}
	return nil
}
