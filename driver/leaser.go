package driver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// leaser carries out the DHCP lease effects of endpoints: the requests to
// the lease client, the renewal loop (leases.go), the journal of leases to
// give back (leasejournal.go) and the blocks of lost leases
// (lostlease.go). It holds exactly what those need; the Driver holds one
// and calls it from CreateEndpoint, DeleteEndpoint and DeleteNetwork.
// Which offer is free (claims, the store's index, the address probe) is
// the Driver's: acquireLease (dhcp.go).
type leaser struct {
	store   Store
	links   linkGetter
	dhcp    LeaseClient // nil: this daemon has no DHCP client
	blocker AddrBlocker // nil when the link layer cannot block
	mark    string
	log     *slog.Logger
	now     func() time.Time
	timers  *leaseTimers
	stop    <-chan struct{} // closed by Driver.Close
	// lockEndpoint takes an endpoint's lock and reads its records
	// (Driver.lockEndpoint): a renewal commits under the same lock as
	// the requests.
	lockEndpoint func(ctx context.Context, netID, epID string) (context.Context, func(), *store.Network, *store.Endpoint, error)
}

// linkGetter reads a link (netlinkutil.Links): an ipvlan lease asks with
// its parent's MAC.
type linkGetter interface {
	Get(ctx context.Context, name string) (netlinkutil.Link, error)
}

// RunLeases loads every lease from the state file and renews each when due,
// at most maxRenewals at once, until ctx ends or the driver closes. Call it
// after Restore.
func (d *Driver) RunLeases(ctx context.Context) error { return d.lease.run(ctx) }

// leaseRequest is the request for an endpoint's lease.
func (ls *leaser) leaseRequest(ctx context.Context, n store.Network, ep store.Endpoint) (LeaseRequest, error) {
	r := LeaseRequest{Parent: n.Parent}
	if n.Type == rules.TypeIpvlan {
		l, err := ls.links.Get(ctx, n.Parent)
		if err != nil {
			return r, fmt.Errorf("parent %s of DHCP network %s: %w", n.Parent, dockerid.Short(n.ID), err)
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
			return r, fmt.Errorf("endpoint %s has no usable MAC %q for DHCP: %w", dockerid.Short(ep.ID), ep.MAC, err)
		}
	}
	if ep.Lease != nil {
		if p, err := netip.ParsePrefix(ep.Lease.Addr); err == nil {
			r.Address = p.Addr()
		}
	}
	return r, nil
}

// releaseLease gives an endpoint's lease back, best effort; false when it
// could not.
func (ls *leaser) releaseLease(ctx context.Context, n store.Network, ep store.Endpoint) bool {
	if ls.dhcp == nil || ep.Lease == nil {
		return false
	}
	r, err := ls.leaseRequest(ctx, n, ep)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, rules.DHCPOf(n).Timeout)
		err = ls.dhcp.Release(ctx, r, *ep.Lease)
		cancel()
	}
	if err != nil {
		ls.log.Warn("could not release DHCP lease: the next start tries again; the server frees it when it expires", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr, "error", err)
		return false
	}
	ls.log.Info("released DHCP lease", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease.Addr)
	return true
}
