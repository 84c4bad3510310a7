package driver

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
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

// announceDelay is how long after Join the first announcement goes: the
// engine moves the link into the container and sets its address within
// that (about 200 ms on engine 20.10).
const announceDelay = 300 * time.Millisecond

// AddrAnnouncer announces addresses on a parent link (probe.Prober).
type AddrAnnouncer interface {
	Announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error
	AnnounceIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error
}

// announcements are the announcement runs under way, by endpoint, so
// that Leave and Close end them.
type announcements struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	running sync.WaitGroup
}

func (a *announcements) start(ep string, run func(ctx context.Context)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancels == nil {
		a.cancels = map[string]context.CancelFunc{}
	}
	if cancel, ok := a.cancels[ep]; ok {
		cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancels[ep] = cancel
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		run(ctx)
		a.mu.Lock()
		defer a.mu.Unlock()
		if c, ok := a.cancels[ep]; ok && ctx.Err() == nil {
			c()
			delete(a.cancels, ep)
		}
	}()
}

// stop ends an endpoint's run; all ends every run and waits.
func (a *announcements) stop(ep string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cancel, ok := a.cancels[ep]; ok {
		cancel()
		delete(a.cancels, ep)
	}
}

func (a *announcements) stopAll() {
	a.mu.Lock()
	for ep, cancel := range a.cancels {
		cancel()
		delete(a.cancels, ep)
	}
	a.mu.Unlock()
	a.running.Wait()
}

// announce starts the background announcements of a joined endpoint.
func (d *Driver) announce(ctx context.Context, n store.Network, ep store.Endpoint) {
	c, on := rules.AnnounceOf(n)
	if !on || d.announcer == nil {
		return
	}
	mac, err := d.probeMAC(ctx, n, ep)
	if err != nil {
		d.log.Warn("not announcing an endpoint: no MAC to send from", "network", n.ID, "endpoint", ep.ID, "error", err)
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
	d.announcing.start(ep.ID, func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(announceDelay):
		}
		var wg sync.WaitGroup
		for _, a := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if a.Is4() {
					err = d.announcer.Announce(ctx, n.Parent, mac, a, c.Count, c.Interval)
				} else {
					err = d.announcer.AnnounceIPv6(ctx, n.Parent, mac, a, c.Count, c.Interval)
				}
				if err != nil && ctx.Err() == nil {
					d.log.Warn("could not announce an endpoint's address", "network", n.ID, "endpoint", ep.ID, "address", a, "error", err)
				}
			}()
		}
		wg.Wait()
	})
}

// ifnames are the container interface names endpoints asked for
// (com.docker.network.endpoint.ifname), from CreateEndpoint to Join, kept
// in memory only: the state file's format stays as older versions read
// it. A daemon restarted between an endpoint's CreateEndpoint and its Join
// forgets the name, and the container gets Docker's (eth0).
type ifnames struct {
	mu sync.Mutex
	by map[string]string
}

// set remembers (or, with "", forgets) an endpoint's name.
func (n *ifnames) set(ep, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == "" {
		delete(n.by, ep)
		return
	}
	if n.by == nil {
		n.by = map[string]string{}
	}
	n.by[ep] = name
}

func (n *ifnames) get(ep string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.by[ep]
}
