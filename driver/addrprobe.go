package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store"
)

// Addresses someone else answers for: before CreateEndpoint answers, the
// endpoint's addresses are probed on the parent (ARP probes from 0.0.0.0,
// RFC 5227 2.1.1; a DAD-style Neighbour Solicitation from :: for IPv6)
// from the endpoint's MAC (the parent's for ipvlan). A DHCP offer that
// another host answers for, or that another endpoint of this daemon holds,
// is declined (DHCPDECLINE) and another one asked for; a static address is
// refused naming the MAC that answered.

// AddrProber probes addresses on a parent link (probe.Prober). A conflict
// is an error wrapping probe.ErrConflict.
type AddrProber interface {
	Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
	ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
}

// probeBudget is a network's probe budget: address_probe when given; else
// on (defaultProbe) for DHCP networks and for networks whose subnet is the
// LAN the host itself is on (a connected route of the parent holds it),
// where a host that is not Docker's may hold an address; off otherwise.
func (d *Driver) probeBudget(ctx context.Context, n store.Network) time.Duration {
	if b, given, err := rules.ParseAddressProbe(n.Options); given && err == nil {
		return b
	}
	if rules.DHCPOf(n).On {
		return rules.DefaultProbe
	}
	if d.routes == nil || len(n.IPv4)+len(n.IPv6) == 0 || n.Internal {
		return 0
	}
	p, err := d.links.Get(ctx, n.Parent)
	if err != nil {
		return 0
	}
	routes, err := d.routes.Routes(ctx)
	if err != nil {
		return 0
	}
	for _, r := range routes {
		if !r.Connected() || r.LinkIndex != p.Index {
			continue
		}
		for _, pool := range append(append([]store.Pool{}, n.IPv4...), n.IPv6...) {
			if sub, err := netip.ParsePrefix(pool.Subnet); err == nil && sub.Overlaps(r.Dst) {
				return rules.DefaultProbe
			}
		}
	}
	return 0
}

// probeMAC is the MAC an endpoint's probes are sent from: its own
// (macvlan), the parent's (ipvlan endpoints share it).
func (d *Driver) probeMAC(ctx context.Context, n store.Network, ep store.Endpoint) (net.HardwareAddr, error) {
	mac := ep.MAC
	if n.Type == rules.TypeIpvlan {
		p, err := d.links.Get(ctx, n.Parent)
		if err != nil {
			return nil, err
		}
		mac = p.MAC
	}
	return net.ParseMAC(mac)
}

// probeAddr probes one address; a conflict is returned, any other failure
// (no raw socket) is logged and the address taken.
func (d *Driver) probeAddr(ctx context.Context, n store.Network, ep store.Endpoint, addr netip.Addr, budget time.Duration) error {
	if d.prober == nil || budget == 0 || !addr.IsValid() {
		return nil
	}
	mac, err := d.probeMAC(ctx, n, ep)
	if err == nil {
		if addr.Is4() {
			err = d.prober.Probe(ctx, n.Parent, mac, addr, budget)
		} else {
			err = d.prober.ProbeIPv6(ctx, n.Parent, mac, addr, budget)
		}
	}
	if err == nil || errors.Is(err, probe.ErrConflict) {
		return err
	}
	d.log.Warn("could not probe an endpoint's address; taking it unprobed", "network", n.ID, "endpoint", ep.ID, "address", addr, "error", err)
	return nil
}

// probeStatic refuses an endpoint whose static or IPAM-given address a
// host on the LAN answers for.
func (d *Driver) probeStatic(ctx context.Context, n store.Network, ep store.Endpoint) error {
	budget := d.probeBudget(ctx, n)
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		if err := d.probeAddr(ctx, n, ep, p.Addr(), budget); err != nil {
			return fmt.Errorf("%w: endpoint %s: %w: run the container with another --ip, or keep %s out of Docker's addresses with --aux-address or --ip-range (docker network create); or switch the probe off with -o address_probe=0", ErrConflict, dockerid.Short(ep.ID), err, p.Addr())
		}
	}
	return nil
}

// claims are the addresses DHCP creates in flight are checking, so that two
// of them offered the same address (a server that offers one to everyone)
// do not both take it.
type claims struct {
	mu sync.Mutex
	by map[claimKey]string // -> endpoint ID
}

type claimKey struct {
	parent string
	addr   netip.Addr
}

// claim takes addr on parent for endpoint; false when another endpoint's
// create holds it.
func (c *claims) claim(parent string, addr netip.Addr, endpoint string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[claimKey]string{}
	}
	k := claimKey{parent, addr}
	if other, ok := c.by[k]; ok && other != endpoint {
		return false
	}
	c.by[k] = endpoint
	return true
}

func (c *claims) release(parent string, addr netip.Addr, endpoint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by[claimKey{parent, addr}] == endpoint {
		delete(c.by, claimKey{parent, addr})
	}
}

// heldElsewhere names another endpoint of this daemon on the parent whose
// record holds addr ("" when none).
func (d *Driver) heldElsewhere(n store.Network, ep store.Endpoint, addr netip.Addr) (string, error) {
	var other string
	err := d.store.View(func(tx *store.Tx) error {
		nets, err := tx.NetworksOn(n.Parent)
		if err != nil {
			return err
		}
		for _, on := range nets {
			eps, err := tx.Endpoints(on.ID)
			if err != nil {
				return err
			}
			for _, e := range eps {
				if a, ok := rules.EndpointV4(e); ok && a == addr && e.ID != ep.ID {
					other = fmt.Sprintf("endpoint %s of network %s holds it", dockerid.Short(e.ID), dockerid.Short(on.ID))
					return nil
				}
			}
		}
		return nil
	})
	return other, err
}
