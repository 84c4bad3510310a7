package driver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Addresses from the LAN's DHCP server (-o dhcp=true, with Docker's null
// IPAM): CreateEndpoint leases an address for the endpoint and answers it,
// Join answers the lease's router and classless routes, DeleteEndpoint
// releases it, and driver/internal/leases renews it for as long as the endpoint exists.
// The lease client (LeaseClient) works from the host namespace on the
// parent link; the lease is part of the endpoint's record.

// LeaseRequest says for whom a lease is.
type LeaseRequest = leases.Request

// LeaseClient talks DHCP for endpoints.
type LeaseClient = leases.Client

// ErrLeaseNAK is wrapped by LeaseClient errors for a server's DHCPNAK.
var ErrLeaseNAK = leases.ErrNAK

// AddrBlocker stops what leaves a parent from an address
// (netlinkutil.Kernel). tag is the driver's mark.
type AddrBlocker = leases.AddrBlocker

// lockParents takes parent links' locks shared, for the leasers' blocks
// of lost leases (leases.BlockOnParent): following a renamed owned VLAN
// (owned.Links.Follow) takes them exclusive, so a block is made before
// the follow, which moves it, or after it, under the new name.
func (d *Driver) lockParents(ctx context.Context, names ...string) (func(), error) {
	reqs := make([]keylock.Req, 0, len(names))
	for _, name := range names {
		reqs = append(reqs, keylock.Shared(keylock.ParentKey(name)))
	}
	_, unlock, err := d.locks.Acquire(ctx, reqs...)
	return unlock, err
}

// RunLeases loads every lease (DHCP and DHCPv6) from the state file and
// renews each when due, at most 32 at once per family, until ctx ends or
// the driver closes. Call it after Restore.
func (d *Driver) RunLeases(ctx context.Context) error {
	if err := d.lease.Run(ctx); err != nil {
		return err
	}
	return d.lease6.Run(ctx)
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
	if d.lease.DHCP == nil {
		return store.Lease{}, unclaim, fmt.Errorf("network %s has dhcp=true but this daemon has no DHCP client", dockerid.Short(n.ID))
	}
	r, err := d.lease.RequestOf(ctx, n, ep)
	if err != nil {
		return store.Lease{}, unclaim, err
	}
	c := rules.DHCPOf(n)
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	budget := d.lan.Budget(ctx, n)
	var declined []string
	for {
		l, err = d.lease.DHCP.Acquire(ctx, r)
		if err != nil {
			if len(declined) > 0 {
				err = fmt.Errorf("%w (after declining %s)", err, strings.Join(declined, "; "))
			}
			return store.Lease{}, unclaim, fmt.Errorf("endpoint %s of network %s: no lease from a DHCP server on %s within dhcp_timeout %s: %w", dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, c.Timeout, err)
		}
		addr := leases.Addr(l)
		why, release, err := offerFree(ctx, d.offerChecks(), n, ep, addr, budget)
		if err != nil { // the lease is not taken: given back, as DHCPv6's is
			if rerr := d.lease.DHCP.Release(context.WithoutCancel(ctx), r, l); rerr != nil {
				d.log.Warn("could not release a DHCP lease whose address could not be checked", "address", addr, "error", rerr)
			}
			return store.Lease{}, unclaim, fmt.Errorf("endpoint %s of network %s: check the offered %s: %w", dockerid.Short(ep.ID), dockerid.Short(n.ID), addr, err)
		}
		if why == "" {
			d.log.Info("leased address", "network", n.ID, "endpoint", ep.ID, "address", l.Addr, "router", l.Router, "server", l.ServerID, "expiry", l.Expiry)
			return l, release, nil
		}
		declined = append(declined, fmt.Sprintf("%s: %s", addr, why))
		d.log.Warn("declined a DHCP offer that is not free", "network", n.ID, "endpoint", ep.ID, "address", addr, "why", why)
		if derr := d.lease.DHCP.Decline(context.WithoutCancel(ctx), r, l); derr != nil {
			d.log.Warn("could not send DHCPDECLINE", "address", addr, "error", derr)
		}
		if len(declined) >= rules.MaxDeclines {
			return store.Lease{}, unclaim, fmt.Errorf("%w: endpoint %s of network %s: the DHCP server on %s offered only addresses that are not free, each declined: %s; free them on the LAN or on the server (its lease table), or widen its pool",
				ErrConflict, dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, strings.Join(declined, "; "))
		}
	}
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
func offerFree(ctx context.Context, o offerChecks, n store.Network, ep store.Endpoint, addr netip.Addr, budget time.Duration) (why string, release func(), err error) {
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
