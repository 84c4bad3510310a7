package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
)

var (
	// ErrNAK is wrapped by the error of a request the server refused
	// with a DHCPNAK: the address is not (or no longer) the client's.
	ErrNAK = errors.New("the DHCP server refused the request (DHCPNAK)")
	// ErrNoAnswer is wrapped by the error of a request no server answered
	// before the context ended.
	ErrNoAnswer = errors.New("no DHCP server answered")
)

// Client leases addresses for endpoints from the DHCP servers of their
// parents' LANs. It is safe for concurrent use; a parent's socket is open
// only while a call on that parent runs.
type Client struct {
	netns      netns.NsHandle
	retransmit time.Duration
	log        *slog.Logger

	mu    sync.Mutex
	ports map[string]*port
}

// Option configures a Client.
type Option func(*Client)

// WithNetns makes the client open its sockets in namespace h (for tests);
// by default they are opened in the namespace of the calling thread,
// which in the daemon is the host's.
func WithNetns(h netns.NsHandle) Option { return func(c *Client) { c.netns = h } }

// WithRetransmit sets the wait before the first retransmission (default
// 2 s, doubled after each one up to 16 s); d below 10 ms is 10 ms.
func WithRetransmit(d time.Duration) Option {
	return func(c *Client) { c.retransmit = max(d, 10*time.Millisecond) }
}

// WithLogger logs every message sent and accepted at debug level.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client.
func New(opts ...Option) *Client {
	c := &Client{netns: netns.None(), retransmit: 2 * time.Second,
		log: slog.New(slog.DiscardHandler), ports: map[string]*port{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

var broadcastIP = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// Acquire leases an address for r: DISCOVER, the first OFFER, REQUEST,
// ACK, all by broadcast on r.Parent, for as long as ctx allows (the
// caller's dhcp_timeout). The lease's times count from the REQUEST.
func (c *Client) Acquire(ctx context.Context, r Request) (Lease, error) {
	if err := r.check(); err != nil {
		return Lease{}, fmt.Errorf("DHCP lease: %w", err)
	}
	p, err := c.port(r.Parent)
	if err != nil {
		return Lease{}, err
	}
	defer c.put(p)
	start := time.Now()
	// One acquisition at a time per parent: a server that takes long per
	// new address (dnsmasq pings each for 3 s, one at a time) then
	// completes them in turn, instead of none while it works through all
	// the queued DISCOVERs first.
	select {
	case p.turn <- struct{}{}:
		defer func() { <-p.turn }()
	case <-ctx.Done():
		err := fmt.Errorf("the lease for %s on parent %s waited %s behind other acquisitions on that parent (one runs at a time) and got no turn: give it more time (dhcp_timeout): %w",
			r.who(), r.Parent, time.Since(start).Round(time.Millisecond), ctx.Err())
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrNoAnswer, err)
		}
		return Lease{}, err
	}
	turn := ""
	if q := time.Since(start); q > 100*time.Millisecond {
		turn = fmt.Sprintf(" (%s of it waiting for its turn)", q.Round(time.Millisecond))
	}
	offer, _, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return discover(r, xid) },
		broadcastIP, func(m *dhcpv4.DHCPv4) bool {
			_, okA := addr4(m.YourIPAddr)
			_, okS := addr4(m.ServerIdentifier())
			return m.MessageType() == dhcpv4.MessageTypeOffer && okA && okS && !m.YourIPAddr.IsUnspecified()
		})
	if err != nil {
		return Lease{}, c.failed(ctx, err, start, fmt.Sprintf("the DISCOVER on parent %s for %s", r.Parent, r.who()), turn)
	}
	addr, _ := addr4(offer.YourIPAddr)
	server, _ := addr4(offer.ServerIdentifier())
	ack, sent, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return request(r, xid, addr, server) },
		broadcastIP, answers(addr, server))
	if err != nil {
		return Lease{}, c.failed(ctx, err, start, fmt.Sprintf("the REQUEST for %s (offered by %s) on parent %s for %s", addr, server, r.Parent, r.who()), turn)
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return Lease{}, nak(ack, addr, r)
	}
	l, err := leaseFromACK(ack, sent)
	if err != nil {
		return Lease{}, fmt.Errorf("server %s on parent %s acknowledged an unusable lease for %s: %w", server, r.Parent, r.who(), err)
	}
	return l, nil
}

// Renew extends l for r, for the same address. Until T2 it asks l's
// server (option 54); from T2 on (Plan's Rebinding) any server. The
// request is a broadcast DHCPREQUEST with ciaddr 0 and option 50, which
// servers answer by broadcast (see the package documentation). Fields the
// ACK leaves out (mask, router, routes, DNS) keep their values in l.
func (c *Client) Renew(ctx context.Context, l Lease, r Request) (Lease, error) {
	if err := r.check(); err != nil {
		return Lease{}, fmt.Errorf("renew DHCP lease: %w", err)
	}
	if !l.Addr.Addr().Is4() {
		return Lease{}, fmt.Errorf("renew DHCP lease for %s: the lease has no IPv4 address (%v): Acquire one", r.who(), l.Addr)
	}
	addr, server := l.Addr.Addr(), netip.Addr{}
	if Plan(l, time.Now()).Phase < Rebinding {
		server = l.ServerID
	}
	p, err := c.port(r.Parent)
	if err != nil {
		return Lease{}, err
	}
	defer c.put(p)
	start := time.Now()
	ack, sent, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return request(r, xid, addr, server) },
		broadcastIP, answers(addr, server))
	if err != nil {
		return Lease{}, c.failed(ctx, err, start, fmt.Sprintf("the renewal of %s on parent %s for %s (the lease holds until %s)",
			addr, r.Parent, r.who(), l.Acquired.Add(l.LeaseTime).Format(time.RFC3339)), "")
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return Lease{}, nak(ack, addr, r)
	}
	n, err := leaseFromACK(ack, sent)
	if err != nil {
		return Lease{}, fmt.Errorf("server %s on parent %s acknowledged an unusable renewal of %s for %s: %w", ack.ServerIdentifier(), r.Parent, addr, r.who(), err)
	}
	return keep(n, l, ack), nil
}

// Release gives l back to its server (DHCPRELEASE, RFC 2131 section
// 4.4.6), best effort: it is sent once and never answered. The error says
// only that it could not be sent.
func (c *Client) Release(ctx context.Context, l Lease, r Request) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("release DHCP lease: %w", err)
	}
	if !l.Addr.Addr().Is4() || !l.ServerID.Is4() {
		return fmt.Errorf("release DHCP lease for %s: the lease lacks an IPv4 address (%v) or server ID (%v)", r.who(), l.Addr, l.ServerID)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release %s on parent %s: %w", l.Addr.Addr(), r.Parent, err)
	}
	p, err := c.port(r.Parent)
	if err != nil {
		return err
	}
	defer c.put(p)
	xid, _ := p.register()
	defer p.unregister(xid)
	m, err := release(r, xid, l)
	if err != nil {
		return err
	}
	// From the leased address to the server: a unicast IP packet from
	// 0.0.0.0 would be dropped by the server's kernel as a martian.
	f := frame(r.MAC, l.Addr.Addr(), l.ServerID, m.ToBytes())
	if _, err := p.raw.WriteTo(f, &packet.Addr{HardwareAddr: broadcastMAC}); err != nil {
		return fmt.Errorf("send DHCPRELEASE of %s on parent %s: %w: the server frees it when the lease expires", l.Addr.Addr(), r.Parent, err)
	}
	c.log.Debug("dhcp sent", "type", "RELEASE", "parent", r.Parent, "xid", xid.String(), "mac", r.MAC.String())
	return nil
}

// answers accepts the ACK for addr, or a NAK, from server (any server
// when server is the zero Addr; a NAK without option 54 too).
func answers(addr, server netip.Addr) func(*dhcpv4.DHCPv4) bool {
	return func(m *dhcpv4.DHCPv4) bool {
		sid, ok := addr4(m.ServerIdentifier())
		switch m.MessageType() {
		case dhcpv4.MessageTypeAck:
			y, _ := addr4(m.YourIPAddr)
			return y == addr && ok && (!server.IsValid() || sid == server)
		case dhcpv4.MessageTypeNak:
			return !server.IsValid() || !ok || sid == server
		}
		return false
	}
}

// failed explains an exchange that got no answer; turn says how long it
// waited for its turn, if it did.
func (c *Client) failed(ctx context.Context, err error, start time.Time, what, turn string) error {
	waited := time.Since(start).Round(time.Millisecond)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w %s within %s%s: check that a DHCP server serves that LAN and that the parent is up, or give it more time (dhcp_timeout): %w",
			ErrNoAnswer, what, waited, turn, err)
	case ctx.Err() != nil:
		return fmt.Errorf("DHCP %s: gave up after %s%s: %w", what, waited, turn, err)
	}
	return err
}

// nak is the error of a DHCPNAK, with the server's message (option 56).
func nak(m *dhcpv4.DHCPv4, addr netip.Addr, r Request) error {
	from := "a DHCP server"
	if sid, ok := addr4(m.ServerIdentifier()); ok {
		from = "server " + sid.String()
	}
	msg := ""
	if s := m.Message(); s != "" {
		msg = fmt.Sprintf(" (%q)", s)
	}
	return fmt.Errorf("%w: %s refused %s on parent %s for %s%s: the address is not the client's; acquire a new lease",
		ErrNAK, from, addr, r.Parent, r.who(), msg)
}
