// Package leases6 carries out the DHCPv6 lease effects of endpoints of
// ipv6_mode=dhcpv6 networks for the driver: acquiring an address (IA_NA)
// for a new endpoint, renewing it at T1 and rebinding it at T2 for as long
// as the endpoint exists (across restarts: the lease is in the endpoint's
// record), and releasing it when the endpoint goes.
//
// Rule: it reaches the store, the kernel and the DHCPv6 client only
// through its own small interfaces (Store, LinkGetter, Client, the DHCP
// leaser's AddrBlocker) and the
// driver's locks only through LockEndpoint; when to act is dhcp6.Plan's;
// the renewal loop is leases.Timers'.
package leases6

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
)

// Client talks DHCPv6 for endpoints (*dhcp6.Client).
type Client interface {
	Acquire(ctx context.Context, r dhcp6.Request) (dhcp6.Lease, error)
	Renew(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error)
	Rebind(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error)
	Release(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
	Decline(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
}

// Free says why an offered address is not free for the endpoint ("" when
// it is, claimed for it until release): the driver's check of DHCP and
// DHCPv6 offers (creates in flight, its other endpoints, the LAN probe).
type Free func(ctx context.Context, addr netip.Addr) (why string, release func(), err error)

// Store is the state as the leaser uses it (*store.DB), and LinkGetter
// reads a link (an ipvlan endpoint's messages go out with its parent's
// MAC): the same as the DHCP leaser's.
type (
	Store      = leases.Store
	LinkGetter = leases.LinkGetter
)

// LockEndpoint takes an endpoint's lock and reads its records; the
// returned func unlocks (the driver's lockEndpoint).
type LockEndpoint = leases.LockEndpoint

// Config is what a Leaser is made of.
type Config struct {
	Store        Store
	Links        LinkGetter
	DHCP         Client             // nil: this daemon has no DHCPv6 client
	Blocker      leases.AddrBlocker // nil: the link layer cannot block
	Mark         string             // the instance's link mark, also the blocks' tag
	Log          *slog.Logger
	Now          func() time.Time
	Stop         <-chan struct{} // closed when the driver closes
	LockEndpoint LockEndpoint
	LockParents  leases.LockParents // nil: blocks are made without a lock (tests)
}

// Leaser carries out the DHCPv6 lease effects of endpoints.
type Leaser struct {
	dhcp         Client
	store        Store
	links        LinkGetter
	blocker      leases.AddrBlocker
	mark         string
	log          *slog.Logger
	now          func() time.Time
	stop         <-chan struct{}
	lockEndpoint LockEndpoint
	lockParents  leases.LockParents
	timers       *leases.Timers
}

// New returns a leaser with nothing scheduled.
func New(c Config) *Leaser {
	return &Leaser{dhcp: c.DHCP, store: c.Store, links: c.Links, blocker: c.Blocker, mark: c.Mark, log: c.Log, now: c.Now, stop: c.Stop,
		lockEndpoint: c.LockEndpoint, lockParents: c.LockParents, timers: leases.NewTimers()}
}

// HasClient says whether the leaser has a DHCPv6 client.
func (ls *Leaser) HasClient() bool { return ls.dhcp != nil }

// Wait waits for the renewal loop and the renewals in flight (after the
// driver closed).
func (ls *Leaser) Wait() { ls.timers.Wait() }

// Timers are the due times of the leases (for tests).
func (ls *Leaser) Timers() *leases.Timers { return ls.timers }

// RequestOf is the client identity and link of an endpoint's lease: on
// macvlan the endpoint's MAC and its DUID-LL, on ipvlan (whose endpoints
// share the parent's MAC) the parent's MAC and a DUID derived from the
// endpoint's ID. The IAID is derived from the endpoint's ID.
func (ls *Leaser) RequestOf(ctx context.Context, n store.Network, ep store.Endpoint) (dhcp6.Request, error) {
	r := dhcp6.Request{Parent: n.Parent, IAID: dhcp6.EndpointIAID(ep.ID)}
	if n.Type == rules.TypeIpvlan {
		l, err := ls.links.Get(ctx, n.Parent)
		if err != nil {
			return r, fmt.Errorf("read the MAC of parent %s for the DHCPv6 lease of endpoint %s: %w", n.Parent, dockerid.Short(ep.ID), err)
		}
		mac, err := net.ParseMAC(l.MAC)
		if err != nil {
			return r, fmt.Errorf("parent %s has no usable MAC (%q) for the DHCPv6 lease of endpoint %s: %w", n.Parent, l.MAC, dockerid.Short(ep.ID), err)
		}
		r.MAC, r.DUID = mac, dhcp6.EndpointDUID(ep.ID)
		return r, nil
	}
	mac, err := net.ParseMAC(ep.MAC)
	if err != nil {
		return r, fmt.Errorf("endpoint %s has no usable MAC (%q) for its DHCPv6 lease: %w", dockerid.Short(ep.ID), ep.MAC, err)
	}
	r.MAC, r.DUID = mac, dhcp6.DUIDFromMAC(mac)
	return r, nil
}

// Acquire leases an address for a new endpoint within timeout. An address
// that free says is not free is declined (Decline) and another asked for,
// up to rules.MaxDeclines times, then refused as a conflict naming each.
// release ends the claim free made; call it once the endpoint is recorded
// (or not).
func (ls *Leaser) Acquire(ctx context.Context, n store.Network, ep store.Endpoint, timeout time.Duration, free Free) (rec store.Lease6, release func(), err error) {
	release = func() {}
	if ls.dhcp == nil {
		return store.Lease6{}, release, fmt.Errorf("network %s has ipv6_mode=dhcpv6 but this daemon has no DHCPv6 client", dockerid.Short(n.ID))
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		return store.Lease6{}, release, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var declined []string
	for {
		l, err := ls.dhcp.Acquire(ctx, r)
		if err != nil {
			if len(declined) > 0 {
				err = fmt.Errorf("%w (after declining %s)", err, strings.Join(declined, "; "))
			}
			return store.Lease6{}, release, fmt.Errorf("endpoint %s of network %s: no DHCPv6 lease from a server on %s within %s: %w; check that the LAN's DHCPv6 server serves %s (or use ipv6_mode=slaac)", dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, timeout, err, n.Parent)
		}
		why, rel, err := free(ctx, l.Addr)
		if err != nil {
			ls.giveBack(ctx, l, r)
			return store.Lease6{}, release, err
		}
		if why == "" {
			rec := Record(l, r)
			ls.log.Info("leased IPv6 address", "network", n.ID, "endpoint", ep.ID, "address", rec.Addr, "server", rec.ServerID, "valid", l.Valid)
			return rec, rel, nil
		}
		declined = append(declined, fmt.Sprintf("%s: %s", l.Addr, why))
		ls.log.Warn("declined a DHCPv6 address that is not free", "network", n.ID, "endpoint", ep.ID, "address", l.Addr, "why", why)
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), declineWait)
		derr := ls.dhcp.Decline(dctx, l, r)
		dcancel()
		if derr != nil {
			ls.log.Warn("could not send a DHCPv6 Decline", "address", l.Addr, "error", derr)
		}
		if len(declined) >= rules.MaxDeclines {
			return store.Lease6{}, release, fmt.Errorf("%w: endpoint %s of network %s: the DHCPv6 server on %s offered only addresses that are not free, each declined: %s; free them on the LAN or on the server (its lease table), or widen its range",
				pluginapi.ErrConflict, dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, strings.Join(declined, "; "))
		}
	}
}

// declineWait bounds how long a Decline waits for the server's Reply
// (the first two transmissions): a server that ignores Declines must not
// hold a create up for the whole retransmission schedule.
const declineWait = 2 * time.Second

// giveBack releases a lease just acquired that will not be used.
func (ls *Leaser) giveBack(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), declineWait)
	defer cancel()
	if err := ls.dhcp.Release(ctx, l, r); err != nil {
		ls.log.Debug("could not release a DHCPv6 lease not taken", "address", l.Addr, "error", err)
	}
}

// Schedule has the endpoint's lease renewed when due.
func (ls *Leaser) Schedule(n store.Network, ep store.Endpoint) {
	if ep.Lease6 == nil {
		return
	}
	ls.timers.Set(leases.Key{Network: n.ID, Endpoint: ep.ID}, next(*ep.Lease6, ls.now()))
}

// Release gives an endpoint's lease back (best effort, in the
// background: the server frees it at its end otherwise; the journal's
// entry, if any, has it released at the next start) and stops renewing
// it; a lost one is not the daemon's to give back, and its block goes.
func (ls *Leaser) Release(ctx context.Context, n store.Network, ep store.Endpoint) {
	ls.timers.Drop(leases.Key{Network: n.ID, Endpoint: ep.ID})
	if ep.Lease6 == nil {
		return
	}
	if !ep.Lease6.Lost.IsZero() {
		ls.unblockLost(ctx, n, ep)
		return
	}
	if ls.dhcp == nil {
		return
	}
	r, err := ls.RequestOf(ctx, n, ep)
	if err != nil {
		ls.log.Warn("could not release a DHCPv6 lease: the next start tries again (journal); the server frees it when it expires", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease6.Addr, "error", err)
		return
	}
	// In the background: a Release waits for the server's Reply (up to
	// about 16 s of retransmissions when it is silent), which neither
	// DeleteEndpoint nor DeleteNetwork (its locks held) should. A shutdown
	// ends it; what the journal holds is released at the next start.
	ls.timers.Go(func() {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		go func() {
			select {
			case <-ls.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := ls.dhcp.Release(ctx, Lease(*ep.Lease6), r); err != nil {
			ls.log.Warn("could not release a DHCPv6 lease: the next start tries again (journal); the server frees it when it expires", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease6.Addr, "error", err)
			return
		}
		ls.unjournal(n, ep)
		ls.log.Info("released IPv6 address", "network", n.ID, "endpoint", ep.ID, "address", ep.Lease6.Addr)
	})
}

// Record is a lease in the endpoint's record.
func Record(l dhcp6.Lease, r dhcp6.Request) store.Lease6 {
	return store.Lease6{Addr: l.Addr.String(), DUID: hex.EncodeToString(r.DUID), IAID: hex.EncodeToString(l.IAID[:]),
		ServerID: hex.EncodeToString(l.ServerID), Acquired: l.Acquired, T1: l.T1, T2: l.T2, Preferred: l.Preferred, Valid: l.Valid}
}

// Lease is the record's lease as the client takes it.
func Lease(rec store.Lease6) dhcp6.Lease {
	addr, _ := netip.ParseAddr(rec.Addr)
	sid, _ := hex.DecodeString(rec.ServerID)
	var iaid [4]byte
	if b, err := hex.DecodeString(rec.IAID); err == nil && len(b) == 4 {
		iaid = [4]byte(b)
	}
	return dhcp6.Lease{Addr: addr, ServerID: sid, IAID: iaid, Acquired: rec.Acquired, T1: rec.T1, T2: rec.T2, Preferred: rec.Preferred, Valid: rec.Valid}
}

// next is when to act on a lease next: dhcp6.Plan's Next, every
// lostRetry once lost, and an hour from now for a lease never due
// (infinite times: the loop re-plans every minute anyway).
func next(rec store.Lease6, now time.Time) time.Time {
	if !rec.Lost.IsZero() {
		return now.Add(lostRetry)
	}
	s := dhcp6.Plan(Lease(rec), now)
	if s.Next.IsZero() {
		return now.Add(time.Hour)
	}
	return s.Next
}

// lostRetry is how often a lost lease's address is asked for again.
const lostRetry = 30 * time.Second
