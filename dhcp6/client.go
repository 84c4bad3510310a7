package dhcp6

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/underlay-net/underlay/internal/rawlink"
	"github.com/vishvananda/netns"
)

// ErrNoAnswer is wrapped by the error of an exchange no server
// answered (acceptably) before the context ended or, for Release and
// Decline, after their last retransmission.
var ErrNoAnswer = errors.New("no DHCPv6 server answered")

// ErrNoAddrsAvail is wrapped by the error of an Acquire whose
// servers said they have no address for the client (status
// NoAddrsAvail).
var ErrNoAddrsAvail = errors.New("the DHCPv6 server has no address for the client (NoAddrsAvail)")

// ErrNoBinding is wrapped by the error of a Renew or Rebind whose
// server no longer holds the lease: status NoBinding, the address
// left out of the IA_NA, or given a valid lifetime of 0. The address
// is not the endpoint's any more: Acquire anew (Hint it).
var ErrNoBinding = errors.New("the DHCPv6 server does not hold the lease (NoBinding)")

// ErrUnusable is wrapped by the error of an Acquire that refused
// every address it was given (not global unicast, lifetimes), and of
// a Renew or Rebind whose Reply is refused: the lease stands as it
// was until it expires.
var ErrUnusable = errors.New("the DHCPv6 server offered only what a container cannot use")

// ErrRefused is wrapped by the error of a Release or Decline the
// server answered with an error status, and of an exchange answered
// with a status this client cannot act on. Neither is fatal to the
// caller: the endpoint stops using a released or declined address
// either way, and the server frees it when it expires.
var ErrRefused = errors.New("the DHCPv6 server refused the request")

// Client leases addresses for endpoints from the DHCPv6 servers of their
// parents' LANs. It is safe for concurrent use; a parent's socket is open
// only while a call on that parent runs.
type Client struct {
	links      rawlink.Opener
	retransmit time.Duration
	collect    time.Duration
	rapid      bool
	log        *slog.Logger

	ports *rawlink.Ports[dhcpv6.TransactionID, reply]
}

// Option configures a Client.
type Option func(*Client)

// WithRetransmit sets the first retransmission timeout of every exchange
// (RFC 8415's IRT, default 1 s; doubled after each retransmission up to
// 16 s, each ±10%); d below 10 ms is 10 ms.
func WithRetransmit(d time.Duration) Option {
	return func(c *Client) { c.retransmit = max(d, 10*time.Millisecond) }
}

// WithCollect sets how long an Acquire waits, after the first usable
// Advertise, for one of a higher preference (default 200 ms; an
// Advertise of preference 255 is taken at once). RFC 8415 section 18.2.1
// has a client collect for the whole first retransmission timeout (1 s);
// a container start should not wait that long on a LAN with one server.
func WithCollect(d time.Duration) Option {
	return func(c *Client) { c.collect = max(d, 0) }
}

// WithRapidCommit makes Solicits carry the Rapid Commit option (RFC 8415
// section 21.14), so that a server that allows it answers with a Reply
// that commits the lease at once: one exchange instead of two. Off by
// default: with several servers on the LAN each one that rapid-commits
// keeps a binding of its own that the client never uses.
func WithRapidCommit() Option { return func(c *Client) { c.rapid = true } }

// WithNetns makes the client open its sockets in namespace h (for
// tests); by default they are opened in the namespace of the calling
// thread, which in the daemon is the host's.
func WithNetns(h netns.NsHandle) Option { return func(c *Client) { c.links.Netns = h } }

// WithConn makes the client exchange frames over the connection open
// returns for a parent instead of a packet socket on it (for tests: an
// in-process server answers, no root needed). The connection carries
// whole Ethernet frames both ways, as an AF_PACKET SOCK_RAW socket does;
// writes are addressed with a *packet.Addr, and reads need not be
// filtered. No filter memberships are made on it.
func WithConn(open func(parent string) (net.PacketConn, error)) Option {
	return func(c *Client) { c.links.Conn = open }
}

// WithLogger logs every message sent and accepted at debug level, and
// the addresses refused at WARN.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client.
func New(opts ...Option) *Client {
	c := &Client{retransmit: time.Second, collect: 200 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
	c.links.Netns = netns.None()
	for _, o := range opts {
		o(c)
	}
	c.ports = rawlink.NewPorts(c.link, demux)
	return c
}
