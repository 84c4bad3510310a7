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
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dhcprecord"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// The two families' adapters: DHCP over the dhcp package's client and
// record.Lease, then DHCP6 over dhcp6's client and record.Lease6.

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
	// Hostname is option 12; "" for none. FQDN sends it in option 81 too.
	Hostname string
	FQDN     bool
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
	Acquire(ctx context.Context, r Request) (record.Lease, error)
	// Renew extends a lease; an error wrapping ErrNAK means the server
	// refused it.
	Renew(ctx context.Context, r Request, l record.Lease) (record.Lease, error)
	// Release gives a lease back.
	Release(ctx context.Context, r Request, l record.Lease) error
	// Decline tells the server an offered address is in use (DHCPDECLINE).
	Decline(ctx context.Context, r Request, l record.Lease) error
}

// ErrNAK is wrapped by Client errors for a server's DHCPNAK.
var ErrNAK = errors.New("the DHCP server refused the lease (DHCPNAK)")

// DHCP is the family of DHCP leases (-o dhcp=true): record.Lease in the
// endpoint's record, Client's exchanges.
type DHCP struct {
	Client Client // nil: this daemon has no DHCP client
}

func (DHCP) Words() Words                                 { return dhcpWords }
func (f DHCP) HasClient() bool                            { return f.Client != nil }
func (DHCP) On(n record.Network) bool                     { return n.Config.DHCP.Leases() }
func (DHCP) Of(ep record.Endpoint) *record.Lease          { return ep.Lease }
func (DHCP) Answer(l record.Lease) string                 { return l.Addr }
func (DHCP) Expired(l record.Lease, now time.Time) bool   { return !now.Before(l.Expiry) }
func (DHCP) Next(l record.Lease, now time.Time) time.Time { return NextAction(l, now) }

func (DHCP) Facts(l record.Lease) Facts {
	return Facts{Addr: Addr(l), Text: l.Addr, Acquired: l.Acquired, Lost: l.Lost, LostWhy: l.LostWhy, Expiry: l.Expiry}
}

func (DHCP) With(ep record.Endpoint, l *record.Lease) record.Endpoint {
	ep.Lease = l
	return ep
}

func (DHCP) MarkLost(l record.Lease, now time.Time, why string) record.Lease {
	return plan.MarkLost(l, now, why)
}

// Due: a held lease is renewed from T1 on.
func (DHCP) Due(l record.Lease, now time.Time) (time.Time, bool) {
	return l.T1, !l.Lost.IsZero() || !now.Before(l.T1)
}

// Resume: at T1, or at once when that has passed (a lost lease too).
func (DHCP) Resume(l record.Lease, now time.Time) time.Time {
	if now.Before(l.T1) {
		return l.T1
	}
	return now
}

// Exchange: a renewal waits no longer than dhcp_timeout, nor past the
// lease's expiry (then it is lost, and that is acted on at once).
func (DHCP) Exchange(ctx context.Context, n record.Network, l record.Lease, now time.Time) (context.Context, context.CancelFunc) {
	deadline := now.Add(n.Config.DHCP.Timeout)
	if l.Lost.IsZero() && l.Expiry.After(now) && l.Expiry.Before(deadline) {
		deadline = l.Expiry
	}
	return context.WithDeadline(ctx, deadline)
}

// Request: on ipvlan the parent's MAC and a client ID of the endpoint's.
func (DHCP) Request(ctx context.Context, links LinkGetter, n record.Network, ep record.Endpoint) (Request, error) {
	r := Request{Parent: n.Parent}
	if n.Type == kernel.KindIpvlan {
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
		// A lease of the IPAM's (a DHCP pool) is renewed as it was taken:
		// with its client ID and host name.
		if id, err := hex.DecodeString(ep.Lease.ClientID); err == nil && len(id) > 0 && r.ClientID == nil {
			r.ClientID = id
		}
		r.Hostname, r.FQDN = ep.Lease.Hostname, ep.Lease.FQDN
	}
	return r, nil
}

func (f DHCP) Acquire(ctx context.Context, r Request, only netip.Addr) (record.Lease, error) {
	r.Only = only
	return f.Client.Acquire(ctx, r)
}

func (f DHCP) Renew(ctx context.Context, r Request, l record.Lease, _ time.Time) (record.Lease, error) {
	return f.Client.Renew(ctx, r, l)
}

func (DHCP) Refused(err error) (string, bool) {
	if !errors.Is(err, ErrNAK) {
		return "", false
	}
	return "the server refused to renew it (DHCPNAK): " + err.Error(), true
}

func (f DHCP) Release(ctx context.Context, r Request, l record.Lease) error {
	return f.Client.Release(ctx, r, l)
}

func (f DHCP) Decline(ctx context.Context, r Request, l record.Lease) error {
	return f.Client.Decline(context.WithoutCancel(ctx), r, l)
}

func (DHCP) Entry(n record.Network, ep record.Endpoint, r Request, l record.Lease) record.PendingRelease {
	return record.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: r.Parent, MAC: r.MAC.String(),
		ClientID: hex.EncodeToString(r.ClientID), Lease: l}
}

func (DHCP) FromEntry(p record.PendingRelease) (Request, record.Lease, bool) {
	mac, _ := net.ParseMAC(p.MAC)
	id, _ := hex.DecodeString(p.ClientID)
	return Request{Parent: p.Parent, MAC: mac, ClientID: id}, p.Lease, p.Lease6 == nil
}

func (DHCP) NoLease(n record.Network, ep record.Endpoint, timeout time.Duration, err error) error {
	return fmt.Errorf("endpoint %s of network %s: no lease from a DHCP server on %s within dhcp_timeout %s: %w", dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, timeout, err)
}

func (DHCP) Leased(l record.Lease) []any {
	return []any{"address", l.Addr, "router", l.Router, "server", l.ServerID, "expiry", l.Expiry}
}

func (DHCP) Renewed(l record.Lease) []any { return []any{"expiry", l.Expiry, "t1", l.T1} }

func (DHCP) RenewFailed(log *slog.Logger, l record.Lease, next time.Time, err error) {
	log.Warn("could not renew DHCP lease; retrying", "t2", l.T2, "expiry", l.Expiry, "next", next, "error", err)
}

// NextAction is when to act on a lease next: the dhcp package's plan
// (T1, then retries at half the time left to T2 and to the expiry, at
// least dhcp.MinRetry apart), and every lostLeaseRetry once it is lost
// (the same address is asked for again).
func NextAction(l record.Lease, now time.Time) time.Time {
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
func Addr(l record.Lease) netip.Addr {
	p, _ := netip.ParsePrefix(l.Addr)
	return p.Addr()
}

// DHCPv6.

// Client6 talks DHCPv6 for endpoints (*dhcp6.Client).
type Client6 interface {
	Acquire(ctx context.Context, r dhcp6.Request) (dhcp6.Lease, error)
	Renew(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error)
	Rebind(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error)
	Release(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
	Decline(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
}

// DHCP6 is the family of DHCPv6 leases (-o ipv6_mode=dhcpv6): an address
// (IA_NA) in record.Lease6 in the endpoint's record, Client6's exchanges,
// dhcp6.Plan's times.
type DHCP6 struct {
	Client Client6 // nil: this daemon has no DHCPv6 client
}

const (
	// exchangeTimeout bounds one renewal's exchange with the servers.
	exchangeTimeout = 10 * time.Second
	// declineWait bounds how long a Decline waits for the server's Reply
	// (the first two transmissions): a server that ignores Declines must
	// not hold a create up for the whole retransmission schedule.
	declineWait = 2 * time.Second
)

func (DHCP6) Words() Words                                  { return dhcp6Words }
func (f DHCP6) HasClient() bool                             { return f.Client != nil }
func (DHCP6) On(n record.Network) bool                      { return config.Leases6(n.Config) }
func (DHCP6) Of(ep record.Endpoint) *record.Lease6          { return ep.Lease6 }
func (DHCP6) Answer(l record.Lease6) string                 { return l.Addr + "/128" }
func (DHCP6) Next(l record.Lease6, now time.Time) time.Time { return next6(l, now) }

func (DHCP6) Expired(l record.Lease6, now time.Time) bool {
	return dhcp6.Plan(dhcprecord.FromRecord6(l), now).Phase == dhcp6.Expired
}

func (DHCP6) Facts(l record.Lease6) Facts {
	return Facts{Addr: dhcprecord.FromRecord6(l).Addr, Text: l.Addr, Acquired: l.Acquired, Lost: l.Lost, LostWhy: l.LostWhy, Expiry: l.Expiry()}
}

func (DHCP6) With(ep record.Endpoint, l *record.Lease6) record.Endpoint {
	ep.Lease6 = l
	return ep
}

func (DHCP6) MarkLost(l record.Lease6, now time.Time, why string) record.Lease6 {
	if l.Lost.IsZero() {
		l.Lost, l.LostWhy = now, why
	}
	return l
}

// Due: a held lease is acted on once dhcp6.Plan leaves Bound.
func (DHCP6) Due(l record.Lease6, now time.Time) (time.Time, bool) {
	s := dhcp6.Plan(dhcprecord.FromRecord6(l), now)
	if s.Next.IsZero() {
		s.Next = now.Add(time.Hour)
	}
	return s.Next, !l.Lost.IsZero() || s.Phase != dhcp6.Bound
}

// Resume: when the plan says (a lost lease's retry, a renewal's retry
// within its phase), or at once when that has passed.
func (DHCP6) Resume(l record.Lease6, now time.Time) time.Time {
	if at := next6(l, now); at.After(now) {
		return at
	}
	return now
}

// Exchange: a renewal waits no longer than exchangeTimeout.
func (DHCP6) Exchange(ctx context.Context, _ record.Network, _ record.Lease6, _ time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, exchangeTimeout)
}

// Request is the client identity and link of an endpoint's lease: on
// macvlan the endpoint's MAC and its DUID-LL, on ipvlan (whose endpoints
// share the parent's MAC) the parent's MAC and a DUID derived from the
// endpoint's ID. The IAID is derived from the endpoint's ID.
func (DHCP6) Request(ctx context.Context, links LinkGetter, n record.Network, ep record.Endpoint) (dhcp6.Request, error) {
	r := dhcp6.Request{Parent: n.Parent, IAID: dhcp6.EndpointIAID(ep.ID)}
	if n.Type == kernel.KindIpvlan {
		l, err := links.Get(ctx, n.Parent)
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
	if l := ep.Lease6; l != nil {
		// A lease is renewed with the identity it was taken with (the
		// IPAM's, of a DHCPv6 pool, has an IAID of the MAC's) and its host
		// name.
		if duid, err := hex.DecodeString(l.DUID); err == nil && len(duid) > 0 {
			r.DUID = duid
		}
		if id, err := hex.DecodeString(l.IAID); err == nil && len(id) == 4 {
			r.IAID = [4]byte(id)
		}
		r.Hostname = l.Hostname
	}
	return r, nil
}

// Acquire: only is asked for as the Solicit's hint; the lifecycle gives
// back another address offered instead.
func (f DHCP6) Acquire(ctx context.Context, r dhcp6.Request, only netip.Addr) (record.Lease6, error) {
	r.Hint = only
	l, err := f.Client.Acquire(ctx, r)
	if err != nil {
		return record.Lease6{}, err
	}
	return dhcprecord.ToRecord6(l, r), nil
}

// Renew renews while dhcp6.Plan says Renewing, rebinds after.
func (f DHCP6) Renew(ctx context.Context, r dhcp6.Request, rec record.Lease6, now time.Time) (record.Lease6, error) {
	l := dhcprecord.FromRecord6(rec)
	var got dhcp6.Lease
	var err error
	if dhcp6.Plan(l, now).Phase == dhcp6.Renewing {
		got, err = f.Client.Renew(ctx, l, r)
	} else {
		got, err = f.Client.Rebind(ctx, l, r)
	}
	if err != nil {
		return record.Lease6{}, err
	}
	return dhcprecord.ToRecord6(got, r), nil
}

func (DHCP6) Refused(err error) (string, bool) {
	if !errors.Is(err, dhcp6.ErrNoBinding) {
		return "", false
	}
	return err.Error(), true
}

func (f DHCP6) Release(ctx context.Context, r dhcp6.Request, l record.Lease6) error {
	return f.Client.Release(ctx, dhcprecord.FromRecord6(l), r)
}

func (f DHCP6) Decline(ctx context.Context, r dhcp6.Request, l record.Lease6) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), declineWait)
	defer cancel()
	return f.Client.Decline(ctx, dhcprecord.FromRecord6(l), r)
}

func (DHCP6) Entry(n record.Network, ep record.Endpoint, r dhcp6.Request, l record.Lease6) record.PendingRelease {
	return record.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: r.Parent, MAC: r.MAC.String(), Lease6: &l}
}

func (DHCP6) FromEntry(p record.PendingRelease) (dhcp6.Request, record.Lease6, bool) {
	if p.Lease6 == nil {
		return dhcp6.Request{}, record.Lease6{}, false
	}
	mac, _ := net.ParseMAC(p.MAC)
	duid, _ := hex.DecodeString(p.Lease6.DUID)
	return dhcp6.Request{Parent: p.Parent, MAC: mac, DUID: duid, IAID: dhcprecord.FromRecord6(*p.Lease6).IAID}, *p.Lease6, true
}

func (DHCP6) NoLease(n record.Network, ep record.Endpoint, timeout time.Duration, err error) error {
	return fmt.Errorf("endpoint %s of network %s: no DHCPv6 lease from a server on %s within %s: %w; check that the LAN's DHCPv6 server serves %s (or use ipv6_mode=slaac)", dockerid.Short(ep.ID), dockerid.Short(n.ID), n.Parent, timeout, err, n.Parent)
}

func (DHCP6) Leased(l record.Lease6) []any {
	return []any{"address", l.Addr, "server", l.ServerID, "valid", l.Valid}
}

func (DHCP6) Renewed(l record.Lease6) []any { return []any{"valid", l.Valid} }

func (DHCP6) RenewFailed(log *slog.Logger, _ record.Lease6, next time.Time, err error) {
	log.Debug("DHCPv6 renewal failed; the lease stands until it expires", "next", next, "error", err)
}

// next6 is when to act on a lease next: dhcp6.Plan's Next, every
// lostLeaseRetry once lost, and an hour from now for a lease never due
// (infinite times: the loop re-plans every minute anyway).
func next6(rec record.Lease6, now time.Time) time.Time {
	if !rec.Lost.IsZero() {
		return now.Add(lostLeaseRetry)
	}
	s := dhcp6.Plan(dhcprecord.FromRecord6(rec), now)
	if s.Next.IsZero() {
		return now.Add(time.Hour)
	}
	return s.Next
}
