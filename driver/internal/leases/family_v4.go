package leases

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store"
)

// Request says for whom a DHCP lease is.
type Request struct {
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

// Client talks DHCP for endpoints.
type Client interface {
	// Acquire runs DISCOVER/OFFER/REQUEST/ACK.
	Acquire(ctx context.Context, r Request) (store.Lease, error)
	// Renew extends a lease; an error wrapping ErrNAK means the server
	// refused it.
	Renew(ctx context.Context, r Request, l store.Lease) (store.Lease, error)
	// Release gives a lease back.
	Release(ctx context.Context, r Request, l store.Lease) error
	// Decline tells the server an offered address is in use (DHCPDECLINE).
	Decline(ctx context.Context, r Request, l store.Lease) error
}

// ErrNAK is wrapped by Client errors for a server's DHCPNAK.
var ErrNAK = errors.New("the DHCP server refused the lease (DHCPNAK)")

// DHCP is the family of DHCP leases (-o dhcp=true): store.Lease in the
// endpoint's record, Client's exchanges.
type DHCP struct {
	Client Client // nil: this daemon has no DHCP client
}

var dhcpWords = Words{
	Name: "DHCP", Option: "dhcp=true", Pool: "pool",
	Leased: "leased address", Declined: "declined a DHCP offer that is not free", NoDecline: "could not send DHCPDECLINE",
	Released: "released DHCP lease", NoRelease: "could not release DHCP lease: the next start tries again; the server frees it when it expires",
	Renewed: "renewed DHCP lease", NotWonBack: "lost DHCP lease not won back yet; asking again",
	WonBack:  "won a lost DHCP lease back: the container sends from its address again",
	NoRecord: "record DHCP lease", NoRecordLvl: slog.LevelError,
	ExpiredWhy: "the lease expired without a renewal", Lost: "DHCP lease lost",
	CommitRetry: dhcp.MinRetryShort, LockRetry: dhcp.MinRetry,
}

func (DHCP) Words() *Words                               { return &dhcpWords }
func (f DHCP) HasClient() bool                           { return f.Client != nil }
func (DHCP) On(n store.Network) bool                     { return rules.DHCPOf(n).On }
func (DHCP) Of(ep store.Endpoint) *store.Lease           { return ep.Lease }
func (DHCP) Addr(l store.Lease) netip.Addr               { return Addr(l) }
func (DHCP) Text(l store.Lease) string                   { return l.Addr }
func (DHCP) Answer(l store.Lease) string                 { return l.Addr }
func (DHCP) Acquired(l store.Lease) time.Time            { return l.Acquired }
func (DHCP) Lost(l store.Lease) time.Time                { return l.Lost }
func (DHCP) Expiry(l store.Lease) time.Time              { return l.Expiry }
func (DHCP) Expired(l store.Lease, now time.Time) bool   { return !now.Before(l.Expiry) }
func (DHCP) Next(l store.Lease, now time.Time) time.Time { return NextAction(l, now) }

func (DHCP) With(ep store.Endpoint, l *store.Lease) store.Endpoint {
	ep.Lease = l
	return ep
}

func (DHCP) MarkLost(l store.Lease, now time.Time, why string) store.Lease {
	return rules.MarkLost(l, now, why)
}

// Due: a held lease is renewed from T1 on.
func (DHCP) Due(l store.Lease, now time.Time) (time.Time, bool) {
	return l.T1, !l.Lost.IsZero() || !now.Before(l.T1)
}

// Exchange: a renewal waits no longer than dhcp_timeout, nor past the
// lease's expiry (then it is lost, and that is acted on at once).
func (DHCP) Exchange(ctx context.Context, n store.Network, l store.Lease, now time.Time) (context.Context, context.CancelFunc) {
	deadline := now.Add(rules.DHCPOf(n).Timeout)
	if l.Lost.IsZero() && l.Expiry.After(now) && l.Expiry.Before(deadline) {
		deadline = l.Expiry
	}
	return context.WithDeadline(ctx, deadline)
}

// Request: on ipvlan the parent's MAC and a client ID of the endpoint's.
func (DHCP) Request(ctx context.Context, links LinkGetter, n store.Network, ep store.Endpoint) (Request, error) {
	r := Request{Parent: n.Parent}
	if n.Type == rules.TypeIpvlan {
		l, err := links.Get(ctx, n.Parent)
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

func (f DHCP) Acquire(ctx context.Context, r Request, only netip.Addr) (store.Lease, error) {
	r.Only = only
	return f.Client.Acquire(ctx, r)
}

func (f DHCP) Renew(ctx context.Context, r Request, l store.Lease, _ time.Time) (store.Lease, error) {
	return f.Client.Renew(ctx, r, l)
}

func (DHCP) Refused(err error) (string, bool) {
	if !errors.Is(err, ErrNAK) {
		return "", false
	}
	return "the server refused to renew it (DHCPNAK): " + err.Error(), true
}

func (f DHCP) Release(ctx context.Context, r Request, l store.Lease) error {
	return f.Client.Release(ctx, r, l)
}

func (f DHCP) Decline(ctx context.Context, r Request, l store.Lease) error {
	return f.Client.Decline(context.WithoutCancel(ctx), r, l)
}

func (DHCP) Entry(n store.Network, ep store.Endpoint, r Request, l store.Lease) store.PendingRelease {
	return store.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: r.Parent, MAC: r.MAC.String(),
		ClientID: hex.EncodeToString(r.ClientID), Lease: l}
}

func (DHCP) FromEntry(p store.PendingRelease) (Request, store.Lease, bool) {
	mac, _ := net.ParseMAC(p.MAC)
	id, _ := hex.DecodeString(p.ClientID)
	return Request{Parent: p.Parent, MAC: mac, ClientID: id}, p.Lease, p.Lease6 == nil
}

func (DHCP) NoLease(n store.Network, ep store.Endpoint, timeout time.Duration, err error) error {
	return fmt.Errorf("endpoint %s of network %s: no lease from a DHCP server on %s within dhcp_timeout %s: %w", dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, timeout, err)
}

func (DHCP) Leased(l store.Lease) []any {
	return []any{"address", l.Addr, "router", l.Router, "server", l.ServerID, "expiry", l.Expiry}
}

func (DHCP) Renewed(l store.Lease) []any { return []any{"expiry", l.Expiry, "t1", l.T1} }

func (DHCP) RenewFailed(log *slog.Logger, l store.Lease, next time.Time, err error) {
	log.Warn("could not renew DHCP lease; retrying", "t2", l.T2, "expiry", l.Expiry, "next", next, "error", err)
}

// NextAction is when to act on a lease next: the dhcp package's plan
// (T1, then retries at half the time left to T2 and to the expiry, at
// least dhcp.MinRetry apart), and every lostLeaseRetry once it is lost
// (the same address is asked for again).
func NextAction(l store.Lease, now time.Time) time.Time {
	if !l.Lost.IsZero() {
		return now.Add(lostLeaseRetry)
	}
	t1, t2, lt := l.Durations()
	p := dhcp.Plan(dhcp.Lease{Acquired: l.Acquired, T1: t1, T2: t2, LeaseTime: lt}, now)
	if p.Phase == dhcp.Expired {
		return now.Add(dhcp.MinRetryShort) // Renew marks it lost; never a hot loop
	}
	return p.Next
}

// lostLeaseRetry is how often a lost lease's address is asked for again
// (both families).
const lostLeaseRetry = 30 * time.Second

// Addr is a lease's address without its prefix length.
func Addr(l store.Lease) netip.Addr {
	p, _ := netip.ParsePrefix(l.Addr)
	return p.Addr()
}
