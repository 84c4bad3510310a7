package leases

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store/record"
)

// Free says why an offered address is not free for the endpoint ("" when
// it is, claimed for it until release): the driver's check of DHCP and
// DHCPv6 offers (creates in flight, the host and its other endpoints,
// the LAN probe).
type Free func(ctx context.Context, addr netip.Addr) (why string, release func(), err error)

// Acquire leases an address for a new endpoint within the network's
// dhcp_timeout. An offer free says is not free is declined and another
// asked for, up to plan.MaxDeclines times, then refused as a conflict
// naming each; an offer free cannot check is given back. release ends
// the claim free made; call it once the endpoint is recorded (or not).
func (ls *Leaser[L, R]) Acquire(ctx context.Context, n record.Network, ep record.Endpoint, free Free) (l L, release func(), err error) {
	var none L
	f, w := ls.Family, ls.Family.Words()
	release = func() {}
	if !f.HasClient() {
		return none, release, fmt.Errorf("network %s has %s but this daemon has no %s client", dockerid.Short(n.ID), w.Option, w.Name)
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return none, release, err
	}
	timeout := n.Config.DHCP.Timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var declined []string
	for {
		l, err := f.Acquire(ctx, r, netip.Addr{})
		if err != nil {
			if len(declined) > 0 {
				err = fmt.Errorf("%w (after declining %s)", err, strings.Join(declined, "; "))
			}
			return none, release, f.NoLease(n, ep, timeout, err)
		}
		addr := f.Facts(l).Addr
		why, rel, err := free(ctx, addr)
		if err != nil { // the lease is not taken: given back
			ls.giveBack(ctx, r, l)
			return none, release, fmt.Errorf("endpoint %s of network %s: check the offered %s: %w", dockerid.Short(ep.ID), dockerid.Short(n.ID), addr, err)
		}
		if why == "" {
			ls.log.Info(w.Leased, append([]any{"network", n.ID, "endpoint", ep.ID}, f.Leased(l)...)...)
			return l, rel, nil
		}
		declined = append(declined, fmt.Sprintf("%s: %s", addr, why))
		ls.log.Warn(w.Declined, "network", n.ID, "endpoint", ep.ID, "address", addr, "why", why)
		if derr := f.Decline(ctx, r, l); derr != nil {
			ls.log.Warn(w.NoDecline, "address", addr, "error", derr)
		}
		if len(declined) >= plan.MaxDeclines {
			return none, release, fmt.Errorf("%w: endpoint %s of network %s: the %s server on %s offered only addresses that are not free, each declined: %s; free them on the LAN or on the server (its lease table), or widen its %s",
				pluginapi.ErrConflict, dockerid.Short(ep.ID), dockerid.Short(n.ID), w.Name, n.Parent, strings.Join(declined, "; "), w.Pool)
		}
	}
}

// giveBack releases a lease just acquired that will not be used, waiting
// no longer than declineWait.
func (ls *Leaser[L, R]) giveBack(ctx context.Context, r R, l L) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), declineWait)
	defer cancel()
	if err := ls.Family.Release(ctx, r, l); err != nil {
		ls.log.Debug("could not release a "+ls.Family.Words().Name+" lease not taken", "address", ls.Family.Facts(l).Text, "error", err)
	}
}
