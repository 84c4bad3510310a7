package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/rawlink"
)

const (
	// maxRounds bounds the DISCOVERs of an Acquire: it starts again after
	// a NAK or a refused ACK, at most this many times in all.
	maxRounds = 5
	// maxRefusals bounds the offers and ACKs an Acquire refuses.
	maxRefusals = 4
)

// Acquire leases an address for r: DISCOVER, the first acceptable OFFER,
// REQUEST, ACK, all by broadcast on r.Parent, for as long as ctx allows
// (the caller's dhcp_timeout). The lease's times count from the REQUEST.
//
// An OFFER that leaseFromACK would refuse (a special address, a mask
// below /8, a lease under MinLeaseTime) is not REQUESTed; one of an
// unusable address is DECLINEd, and the DISCOVER is sent again within
// half a second. A NAK (from the server REQUESTed, with option 54) or a
// refused ACK (an unusable address is DECLINEd, other terms RELEASEd)
// starts over with a new DISCOVER half a second later. After maxRefusals
// refusals or maxRounds rounds, or when ctx ends, the error names what
// was offered and why it was not taken.
func (c *Client) Acquire(ctx context.Context, r Request) (Lease, error) {
	p, done, err := c.take(r, "DHCP lease")
	if err != nil {
		return Lease{}, err
	}
	defer done()
	a := &acquisition{c: c, p: p, r: r, start: time.Now()}
	for round := 1; ; round++ {
		offer, _, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return discover(r, xid) },
			a.offer, &a.seen)
		if err != nil {
			return Lease{}, a.failed(ctx, err, fmt.Sprintf("the DISCOVER on parent %s for %s", r.Parent, r.who()))
		}
		addr, _ := addr4(offer.YourIPAddr)
		server, _ := addr4(offer.ServerIdentifier())
		ack, sent, err := c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return request(r, xid, addr, server) },
			answers(addr, server, &a.seen), &a.seen)
		if err != nil {
			return Lease{}, a.failed(ctx, err, fmt.Sprintf("the REQUEST for %s (offered by %s) on parent %s for %s", addr, server, r.Parent, r.who()))
		}
		if ack.MessageType() == dhcpv4.MessageTypeNak {
			err := nak(ack, addr, r)
			a.naks = append(a.naks, err.Error())
			if round >= maxRounds {
				return Lease{}, fmt.Errorf("DHCP lease for %s on parent %s: NAKed %d times in %s, each time after a new DISCOVER; the last: %w",
					r.who(), r.Parent, round, time.Since(a.start).Round(time.Millisecond), err)
			}
			c.log.Debug("dhcp NAK while acquiring: DISCOVER again", "parent", r.Parent, "mac", r.MAC.String(), "error", err.Error())
		} else {
			l, err := leaseFromACK(ack, sent)
			if err == nil {
				for _, w := range l.Warnings {
					c.log.Warn("dropped what a container cannot use from a DHCP lease", "parent", r.Parent, "mac", r.MAC.String(), "address", l.Addr.String(), "dropped", w)
				}
				return l, nil
			}
			a.refuse(addr, server, "acknowledged", err)
			if len(a.refused) >= maxRefusals || round >= maxRounds {
				return Lease{}, a.failed(ctx, errStop, "")
			}
		}
		if err := rawlink.Pause(ctx, againWait); err != nil {
			return Lease{}, a.failed(ctx, err, fmt.Sprintf("the DISCOVER on parent %s for %s", r.Parent, r.who()))
		}
	}
}

// acquisition is what one Acquire saw, for its error.
type acquisition struct {
	c     *Client
	p     *rawlink.Port[dhcpv4.TransactionID, reply]
	r     Request
	start time.Time
	seen  notes
	// refused are the offers and ACKs refused, others the offers of
	// other addresses than r.Only, naks the NAKs that started over.
	refused, others, naks []string
}

// offer judges an OFFER (from any Ethernet source).
func (a *acquisition) offer(m *dhcpv4.DHCPv4, _ net.HardwareAddr) verdict {
	if m.MessageType() != dhcpv4.MessageTypeOffer {
		return skip
	}
	addr, okA := addr4(m.YourIPAddr)
	server, okS := addr4(m.ServerIdentifier())
	if !okA || addr.IsUnspecified() || !okS || server.IsUnspecified() {
		a.seen.add("ignored an OFFER without an address or a server identifier (option 54)")
		return skip
	}
	if a.r.Only.IsValid() && addr != a.r.Only {
		if o := fmt.Sprintf("%s by server %s", addr, server); !slices.Contains(a.others, o) {
			a.others = append(a.others, o)
		}
		return skip
	}
	if err := checkOffer(m, addr, server); err != nil {
		a.refuse(addr, server, "offered", err)
		if len(a.refused) >= maxRefusals {
			return stop
		}
		return again
	}
	return take
}

// refuse records a refused offer or ACK and tells the server: DECLINE for
// an unusable address, RELEASE of an ACKed lease refused for its terms.
func (a *acquisition) refuse(addr, server netip.Addr, how string, err error) {
	what := fmt.Sprintf("%s %s by server %s: %v", addr, how, server, err)
	var bad *badAddress
	switch {
	case errors.As(err, &bad):
		if a.c.decline(a.p, a.r, addr, server, bad.Error()) == nil {
			what += " (declined)"
		}
	case how == "acknowledged" && addr.Is4() && server.Is4():
		if a.c.release(a.p, a.r, addr, server) == nil {
			what += " (released)"
		}
	}
	a.refused = append(a.refused, what)
	a.c.log.Warn("refused a DHCP lease", "parent", a.r.Parent, "mac", a.r.MAC.String(), "refused", what)
}

// failed explains an Acquire that ends without a lease.
func (a *acquisition) failed(ctx context.Context, err error, what string) error {
	r, waited := a.r, time.Since(a.start).Round(time.Millisecond)
	switch {
	case errors.Is(err, errStop):
		return fmt.Errorf("%w: DHCP lease for %s on parent %s: refused %d offers and ACKs in %s: %s%s: fix the DHCP server's configuration",
			ErrUnusable, r.who(), r.Parent, len(a.refused), waited, strings.Join(a.refused, "; "), &a.seen)
	case ctx.Err() == nil:
		return err
	case r.Only.IsValid() && len(a.others) > 0:
		return fmt.Errorf("%w: DHCP lease for %s on parent %s: asked for %s only, and within %s was offered %s instead (not taken)%s: the address may now be another host's: %w",
			ErrNotOffered, r.who(), r.Parent, r.Only, waited, strings.Join(a.others, ", "), &a.seen, ctx.Err())
	case len(a.refused) > 0:
		return fmt.Errorf("%w: DHCP lease for %s on parent %s: refused within %s: %s%s: fix the DHCP server's configuration, or give it more time (dhcp_timeout): %w",
			ErrUnusable, r.who(), r.Parent, waited, strings.Join(a.refused, "; "), &a.seen, ctx.Err())
	case len(a.naks) > 0:
		return fmt.Errorf("%w: DHCP lease for %s on parent %s: NAKed %d times within %s (%s)%s: %w",
			ErrNAK, r.who(), r.Parent, len(a.naks), waited, a.naks[len(a.naks)-1], &a.seen, ctx.Err())
	}
	return a.c.failed(ctx, err, a.start, what, &a.seen)
}
