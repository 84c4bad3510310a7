package driver

import (
	"context"
	"net/netip"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Addresses from the LAN's DHCP server (-o dhcp=true, with Docker's null
// IPAM): CreateEndpoint leases an address for the endpoint and answers it
// (dhcpAddr, leased: the lifecycle of driver/internal/leases, the same as
// DHCPv6's), Join answers the lease's router and classless routes,
// DeleteEndpoint releases it, and driver/internal/leases renews it for as
// long as the endpoint exists.
// The lease clients (leases.Client over the dhcp package, leases.Client6)
// work from the host namespace on the parent link; the lease is part of
// the endpoint's record.

// RunLeases loads every lease (DHCP and DHCPv6) from the state file and
// renews each when due, at most 32 at once per family, until ctx ends or
// the driver closes. Call it after Restore.
func (d *Driver) RunLeases(ctx context.Context) error {
	return d.leases.Run(ctx)
}

// dhcpAddr is the address source of DHCP networks: a lease of the LAN's
// DHCP server (driver/internal/leases), answered as the endpoint's IPv4
// address.
func (d *Driver) dhcpAddr(ctx context.Context, n record.Network, ep *record.Endpoint, existing *record.Endpoint) (grant, error) {
	if !n.Config.DHCP.On {
		return grant{}, nil
	}
	return leased(ctx, d, d.leases.V4, n, ep, existing, false)
}

// leased gives ep a lease of ls's family (its address in ep.IPv6 when
// six, in ep.IPv4 otherwise): the one the endpoint's record holds when
// Docker asks again with the same MAC, a new one otherwise, whose offers
// the driver's checks decline when not free (offerFree) and which is
// journaled until the endpoint's commit holds it. The grant's undo gives
// it back; start has it renewed.
func leased[L, R any](ctx context.Context, d *Driver, ls *leases.Leaser[L, R], n record.Network, ep, existing *record.Endpoint, six bool) (grant, error) {
	f := ls.Family
	field := &ep.IPv4
	if six {
		field = &ep.IPv6
	}
	g := grant{
		answer: func(a *network.EndpointInterface) {
			if six {
				a.AddressIPv6 = ep.IPv6
			} else {
				a.Address = ep.IPv4
			}
		},
		commit: func(tx *store.Tx) error { return ls.Pending(tx, n, *ep) },
		start:  func() { ls.Schedule(n, *ep) },
	}
	if existing != nil && f.Of(*existing) != nil {
		if existing.MAC == ep.MAC { // Docker asked again
			*ep = f.With(*ep, f.Of(*existing))
			*field = f.Answer(*f.Of(*existing))
			return g, nil
		}
		ls.Forget(context.WithoutCancel(ctx), n, *existing) // asked again with another MAC: its lease is not this one's
	}
	checks, budget := d.offerChecks(), d.lan.Budget(ctx, n)
	l, unclaim, err := ls.Acquire(ctx, n, *ep, func(ctx context.Context, addr netip.Addr) (string, func(), error) {
		return offerFree(ctx, checks, n, *ep, addr, budget)
	})
	if err != nil {
		return grant{}, err
	}
	*ep = f.With(*ep, &l)
	*field = f.Answer(l)
	g.unclaim = unclaim
	g.undo = func() { ls.Forget(context.WithoutCancel(ctx), n, *ep) }
	if err := ls.Journal(ctx, n, *ep); err != nil { // the commit removes it
		g.undo()
		unclaim()
		return grant{}, err
	}
	return g, nil
}

// offerChecks is what checks an offered address (DHCP's or DHCPv6's):
// the claims of creates in flight, the holders no probe sees (the host,
// the store's endpoints: addrheld.go), the LAN probe.
type offerChecks struct {
	claims *lan.Claims
	links  netlinkutil.Links
	store  Store
	lan    *lan.LAN
}

// offerFree says why an offered address is not free for ep ("" when it
// is: then it is claimed for ep until release): another create in flight
// was offered it, the host or another endpoint of this daemon on the
// parent holds it, or a host on the LAN answers a probe for it (within
// budget).
func offerFree(ctx context.Context, o offerChecks, n record.Network, ep record.Endpoint, addr netip.Addr, budget time.Duration) (why string, release func(), err error) {
	if !o.claims.Claim(n.Parent, addr, ep.ID) {
		return "another endpoint being created was offered it too", nil, nil
	}
	release = func() { o.claims.Release(n.Parent, addr, ep.ID) }
	h, err := addrHeld(ctx, o.links, o.store, n, ep, addr)
	if err != nil || h.held() {
		release()
		return h.String(), nil, err
	}
	if perr := o.lan.Probe(ctx, n, ep, addr, budget); perr != nil {
		release()
		return perr.Error(), nil, nil
	}
	return "", release, nil
}

// offerChecks are the driver's checks of an offered address.
func (d *Driver) offerChecks() offerChecks {
	return offerChecks{claims: &d.claims, links: d.links, store: d.store, lan: d.lan}
}
