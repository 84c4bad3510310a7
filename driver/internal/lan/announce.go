package lan

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/store/record"
)

// Announcements: when a container appears, its neighbours and the LAN's
// switches learn its MAC (RFC 5227 section 3 ARP announcements for IPv4,
// RFC 4861 7.2.6 unsolicited Neighbour Advertisements with the override
// flag for IPv6), sent from the host namespace on the parent with the
// endpoint's MAC (the parent's for ipvlan) in the background after Join,
// never delaying the container's start. Engines 28 and later announce
// every driver's endpoints themselves (they send
// com.docker.network.enable_ipv4 in CreateNetwork, which 20.10 does not):
// on their networks underlay adds nothing. ipvlan l3/l3s endpoints are
// routed by the host: no L2 neighbour on the LAN to tell.

// AnnounceDelay is how long after Join the first announcement goes: the
// engine moves the link into the container and sets its address within
// that (about 200 ms on engine 20.10).
const AnnounceDelay = 300 * time.Millisecond

// Announce starts the background announcements of a joined endpoint.
func (l *LAN) Announce(ctx context.Context, n record.Network, ep record.Endpoint) {
	c, on := plan.Announcing(n)
	if !on || l.Announcer == nil {
		return
	}
	mac, err := l.MAC(ctx, n, ep)
	if err != nil {
		l.Log.Warn("not announcing an endpoint: no MAC to send from", "network", n.ID, "endpoint", ep.ID, "error", err)
		return
	}
	var addrs []netip.Addr
	for _, s := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(s); err == nil {
			addrs = append(addrs, p.Addr())
		}
	}
	if len(addrs) == 0 {
		return
	}
	l.running.Start(ep.ID, func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(AnnounceDelay):
		}
		var wg sync.WaitGroup
		for _, a := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if a.Is4() {
					err = l.Announcer.Announce(ctx, n.Parent, mac, a, c.Count, c.Interval)
				} else {
					err = l.Announcer.AnnounceIPv6(ctx, n.Parent, mac, a, c.Count, c.Interval)
				}
				if err != nil && ctx.Err() == nil {
					l.Log.Warn("could not announce an endpoint's address", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
				}
			}()
		}
		wg.Wait()
	})
}

// StopAnnouncing ends an endpoint's announcements (it leaves or goes).
func (l *LAN) StopAnnouncing(ep string) { l.running.Stop(ep) }

// Close ends every announcement run and waits for them.
func (l *LAN) Close() { l.running.StopAll() }
