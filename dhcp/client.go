package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/rawlink"
	"github.com/vishvananda/netns"
)

var (
	// ErrNAK is wrapped by the error of a request the server refused
	// with a DHCPNAK: the address is not (or no longer) the client's.
	ErrNAK = errors.New("the DHCP server refused the request (DHCPNAK)")
	// ErrNoAnswer is wrapped by the error of a request no server answered
	// before the context ended.
	ErrNoAnswer = errors.New("no DHCP server answered")
	// ErrFragmented is wrapped, beside ErrNoAnswer, when a reply came
	// IP-fragmented: fragments are not reassembled.
	ErrFragmented = errors.New("a DHCP reply came IP-fragmented")
	// ErrNotOffered is wrapped by the error of an Acquire for
	// Request.Only when only other addresses were offered.
	ErrNotOffered = errors.New("the address asked for was not offered")
	// ErrUnusable is wrapped by the error of an Acquire that refused every
	// offer or ACK it got (a special address, a mask below /8, a lease
	// under MinLeaseTime), and of a Renew whose ACK is refused.
	ErrUnusable = errors.New("the DHCP server offered only what a container cannot use")
)

// Client leases addresses for endpoints from the DHCP servers of their
// parents' LANs. It is safe for concurrent use; a parent's socket is open
// only while a call on that parent runs.
type Client struct {
	links      rawlink.Opener
	retransmit time.Duration
	log        *slog.Logger

	ports *rawlink.Ports[dhcpv4.TransactionID, reply]
}

// Option configures a Client.
type Option func(*Client)

// WithNetns makes the client open its sockets in namespace h (for tests);
// by default they are opened in the namespace of the calling thread,
// which in the daemon is the host's.
func WithNetns(h netns.NsHandle) Option { return func(c *Client) { c.links.Netns = h } }

// WithConn makes the client exchange frames over the connection open
// returns for a parent instead of a packet socket on it (for tests: an
// in-process server answers, no root needed). The connection carries whole
// Ethernet frames both ways, as an AF_PACKET SOCK_RAW socket does; writes
// are addressed with a *packet.Addr, and reads need not be filtered (the
// client drops what is not a reply for it). It is opened when a call on
// the parent needs it and none is open, and closed when the last call on
// it returns.
func WithConn(open func(parent string) (net.PacketConn, error)) Option {
	return func(c *Client) { c.links.Conn = open }
}

// WithRetransmit sets the wait before the first retransmission (default
// 2 s, doubled after each one up to 16 s); d below 10 ms is 10 ms.
func WithRetransmit(d time.Duration) Option {
	return func(c *Client) { c.retransmit = max(d, 10*time.Millisecond) }
}

// WithLogger logs every message sent and accepted at debug level.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client.
func New(opts ...Option) *Client {
	c := &Client{links: rawlink.Opener{Netns: netns.None()}, retransmit: 2 * time.Second, log: slog.New(slog.DiscardHandler)}
	c.ports = rawlink.NewPorts(c.link, demux)
	for _, o := range opts {
		o(c)
	}
	return c
}

// Renew extends l for r, for the same address. Until T2 it asks l's
// server (option 54); from T2 on (Plan's Rebinding) any server. The
// request is a broadcast DHCPREQUEST with ciaddr 0 and option 50, which
// servers answer by broadcast (see the package documentation). Fields the
// ACK leaves out (mask, router, routes, DNS) keep their values in l.
func (c *Client) Renew(ctx context.Context, l Lease, r Request) (Lease, error) {
	if err := r.check(); err == nil && !l.Addr.Addr().Is4() {
		return Lease{}, fmt.Errorf("renew DHCP lease for %s: the lease has no IPv4 address (%v): Acquire one", r.who(), l.Addr)
	}
	p, done, err := c.take(r, "renew DHCP lease")
	if err != nil {
		return Lease{}, err
	}
	defer done()
	addr, server := l.Addr.Addr(), netip.Addr{}
	if Plan(l, time.Now()).Phase < Rebinding {
		server = l.ServerID
	}
	start := time.Now()
	var seen notes
	ack, sent, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return request(r, xid, addr, server) },
		answers(addr, server, &seen), &seen)
	if err != nil {
		return Lease{}, c.failed(ctx, err, start, fmt.Sprintf("the renewal of %s on parent %s for %s (the lease holds until %s)",
			addr, r.Parent, r.who(), l.Acquired.Add(l.LeaseTime).Format(time.RFC3339)), &seen)
	}
	if ack.MessageType() == dhcpv4.MessageTypeNak {
		return Lease{}, nak(ack, addr, r)
	}
	n, err := leaseFromACK(ack, sent)
	if err != nil {
		return Lease{}, fmt.Errorf("%w: server %s on parent %s acknowledged a renewal of %s for %s that is refused: %w; the lease stands as it was until it expires",
			ErrUnusable, ack.ServerIdentifier(), r.Parent, addr, r.who(), err)
	}
	return keep(n, l, ack), nil
}

// Release gives l back to its server (DHCPRELEASE, RFC 2131 section
// 4.4.6), best effort: it is sent once and never answered. The error says
// only that it could not be sent.
func (c *Client) Release(ctx context.Context, l Lease, r Request) error {
	return c.tell(ctx, l, r, "release", func(p *rawlink.Port[dhcpv4.TransactionID, reply]) error {
		return c.release(p, r, l.Addr.Addr(), l.ServerID)
	})
}

// Decline tells l's server that l's address is in use (DHCPDECLINE, RFC
// 2131 sections 3.1 and 4.4.1), e.g. after an ARP probe was answered or
// the address is another endpoint's: the server marks it and offers
// another to the next DISCOVER, so call Acquire again. Like Release it is
// sent once, by broadcast, and never answered; the error says only that
// it could not be sent. The endpoint must not use the address.
func (c *Client) Decline(ctx context.Context, l Lease, r Request) error {
	return c.tell(ctx, l, r, "decline", func(p *rawlink.Port[dhcpv4.TransactionID, reply]) error {
		return c.decline(p, r, l.Addr.Addr(), l.ServerID, "address in use")
	})
}

// tell checks l and r for a Release or Decline (op) and sends it on r's
// parent with send.
func (c *Client) tell(ctx context.Context, l Lease, r Request, op string, send func(*rawlink.Port[dhcpv4.TransactionID, reply]) error) error {
	if err := r.check(); err == nil && (!l.Addr.Addr().Is4() || !l.ServerID.Is4()) {
		return fmt.Errorf("%s DHCP lease for %s: the lease lacks an IPv4 address (%v) or server ID (%v)", op, r.who(), l.Addr, l.ServerID)
	} else if err == nil && ctx.Err() != nil {
		return fmt.Errorf("%s %s on parent %s: %w", op, l.Addr.Addr(), r.Parent, ctx.Err())
	}
	p, done, err := c.take(r, op+" DHCP lease")
	if err != nil {
		return err
	}
	defer done()
	return send(p)
}

// take checks r and takes the port of its parent for a call (what names
// it in errors); done gives it back.
func (c *Client) take(r Request, what string) (p *rawlink.Port[dhcpv4.TransactionID, reply], done func(), err error) {
	if err := r.check(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return c.ports.Take(r.Parent, nil)
}

// release sends a DHCPRELEASE of addr to server: from the leased address,
// since a unicast IP packet from 0.0.0.0 would be dropped by the server's
// kernel as a martian.
func (c *Client) release(p *rawlink.Port[dhcpv4.TransactionID, reply], r Request, addr, server netip.Addr) error {
	return c.once(p, r, addr, addr, server, "the server frees it when the lease expires",
		func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return release(r, xid, addr, server) })
}

// decline sends a DHCPDECLINE of addr to server, from 0.0.0.0 to the
// broadcast address, with why as option 56.
func (c *Client) decline(p *rawlink.Port[dhcpv4.TransactionID, reply], r Request, addr, server netip.Addr, why string) error {
	return c.once(p, r, addr, netip.IPv4Unspecified(), broadcastIP, "check that the link is up; the endpoint must not use the address either way",
		func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return decline(r, xid, addr, server, why) })
}

// once sends the message build makes about addr, from src to dst (by
// Ethernet broadcast), once and unanswered; fix ends its error.
func (c *Client) once(p *rawlink.Port[dhcpv4.TransactionID, reply], r Request, addr, src, dst netip.Addr, fix string,
	build func(dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error)) error {
	xid, _ := p.Register(newXID)
	defer p.Unregister(xid)
	m, err := build(xid)
	if err != nil {
		return err
	}
	typ := m.MessageType().String()
	if err := p.Send(frame(r.MAC, src, dst, m.ToBytes())); err != nil {
		return fmt.Errorf("send DHCP%s of %s on parent %s: %w: %s", typ, addr, r.Parent, err, fix)
	}
	c.log.Debug("dhcp sent", "type", typ, "parent", r.Parent, "xid", xid.String(), "mac", r.MAC.String(), "address", addr.String())
	return nil
}

// answers accepts the ACK for addr from server (any server when server
// is the zero Addr), or its NAK, from any Ethernet source. A NAK without
// option 54 (RFC 2131 requires it) or from another server is ignored and
// noted in seen.
func answers(addr, server netip.Addr, seen *notes) func(*dhcpv4.DHCPv4, net.HardwareAddr) verdict {
	return func(m *dhcpv4.DHCPv4, _ net.HardwareAddr) verdict {
		sid, ok := addr4(m.ServerIdentifier())
		switch m.MessageType() {
		case dhcpv4.MessageTypeAck:
			if y, _ := addr4(m.YourIPAddr); y == addr && ok && (!server.IsValid() || sid == server) {
				return take
			}
		case dhcpv4.MessageTypeNak:
			switch {
			case !ok:
				seen.add("ignored a DHCPNAK without a server identifier (option 54, which RFC 2131 requires)")
			case server.IsValid() && sid != server:
				seen.add(fmt.Sprintf("ignored a DHCPNAK from server %s, which was not asked (the REQUEST named %s)", sid, server))
			default:
				return take
			}
		}
		return skip
	}
}

// notes collect what exchanges saw beside their answers, for an error.
type notes struct {
	seen []string
	frag string // the last fragmented reply, if any
}

func (n *notes) add(s string) {
	if !slices.Contains(n.seen, s) {
		n.seen = append(n.seen, s)
	}
}

func (n *notes) fragmented(s string) { n.frag = s }

// String is "" or "; " and what was seen.
func (n *notes) String() string {
	if len(n.seen) == 0 {
		return ""
	}
	return "; " + strings.Join(n.seen, "; ")
}

// failed explains an exchange that got no answer.
func (c *Client) failed(ctx context.Context, err error, start time.Time, what string, seen *notes) error {
	waited := time.Since(start).Round(time.Millisecond)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && seen.frag != "":
		return fmt.Errorf("%w %s within %s: %w %s%s: %w", ErrNoAnswer, what, waited, ErrFragmented, seen.frag, seen, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w %s within %s%s: check that a DHCP server serves that LAN and that the parent is up, or give it more time (dhcp_timeout): %w",
			ErrNoAnswer, what, waited, seen, err)
	case ctx.Err() != nil:
		return fmt.Errorf("DHCP %s: gave up after %s%s: %w", what, waited, seen, err)
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
