package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/underlay-net/underlay/internal/rawlink"
)

const (
	// maxRounds bounds the Solicits of an Acquire: it starts again after
	// a Reply to its Request that gives no usable address.
	maxRounds = 5
	// againWait is the pause before an Acquire solicits again.
	againWait = 500 * time.Millisecond
)

// Acquire leases an address for r: Solicit, the best usable Advertise
// (see WithCollect), Request, Reply, all to All_DHCP_Relay_Agents_and_
// Servers on r.Parent, for as long as ctx allows. With WithRapidCommit a
// Reply to the Solicit that commits the lease ends it at once. The lease's
// times count from the Request (the Solicit, for a rapid commit).
//
// An Advertise with status NoAddrsAvail, without a server identifier or
// with no usable address (see the package documentation) is ignored. A
// Reply whose IA_NA says NoAddrsAvail or NotOnLink, or holds no usable
// address, starts over with a Solicit after half a second (an unusable
// address is Declined first, once, unanswered), at most maxRounds times.
func (c *Client) Acquire(ctx context.Context, r Request) (Lease, error) {
	p, done, err := c.take(&r, "DHCPv6 lease")
	if err != nil {
		return Lease{}, err
	}
	defer done()
	start := time.Now()
	var seen notes
	var refused []string
	for round := 1; ; round++ {
		adv, sent, err := c.run(ctx, p, &r, exchange{typ: dhcpv6.MessageTypeSolicit, addr: r.Hint, rapid: c.rapid,
			accept: c.advertise(&r, &seen)})
		if err != nil {
			return Lease{}, c.acquireFailed(ctx, err, start, r, refused, seen, "the Solicit")
		}
		offered, err := leaseFrom(adv, r.IAID, netip.Addr{}, sent)
		if err != nil { // advertise accepted it: cannot happen
			return Lease{}, fmt.Errorf("DHCPv6 lease for %s on parent %s: %w", r.who(), r.Parent, err)
		}
		rep := adv
		if adv.MessageType == dhcpv6.MessageTypeAdvertise {
			rep, sent, err = c.run(ctx, p, &r, exchange{typ: dhcpv6.MessageTypeRequest, addr: offered.Addr, server: offered.ServerID,
				accept: fromServer(offered.ServerID, &seen)})
			if err != nil {
				return Lease{}, c.acquireFailed(ctx, err, start, r, refused, seen,
					fmt.Sprintf("the Request for %s (advertised by server %x)", offered.Addr, offered.ServerID))
			}
		}
		l, err := leaseFrom(rep, r.IAID, netip.Addr{}, sent)
		if err == nil {
			for _, w := range l.Warnings {
				c.log.Warn("changed what a DHCPv6 server granted", "parent", r.Parent, "mac", r.MAC.String(), "address", l.Addr.String(), "change", w)
			}
			return l, nil
		}
		what := fmt.Sprintf("server %x answered the Request for %s: %v", offered.ServerID, offered.Addr, err)
		var ref *refusal
		var st *statusError
		switch {
		case errors.As(err, &ref) && ref.addr.IsValid():
			if c.decline(p, &r, ref.addr, offered.ServerID) == nil {
				what += " (declined)"
			}
		case errors.As(err, &st) && st.code == iana.StatusNotOnLink:
			r.Hint = netip.Addr{}
		}
		refused = append(refused, what)
		c.log.Warn("refused a DHCPv6 lease", "parent", r.Parent, "mac", r.MAC.String(), "refused", what)
		if round >= maxRounds {
			return Lease{}, fmt.Errorf("%w: DHCPv6 lease for %s on parent %s: %d rounds in %s gave no usable address: %s%s: fix the DHCPv6 server's configuration",
				kind(refused), r.who(), r.Parent, round, time.Since(start).Round(time.Millisecond), strings.Join(refused, "; "), seen)
		}
		if err := rawlink.Pause(ctx, againWait); err != nil {
			return Lease{}, c.acquireFailed(ctx, err, start, r, refused, seen, "the Solicit")
		}
	}
}

// advertise judges a reply to a Solicit: an Advertise with a usable
// address is kept, ranked by its preference (255: taken at once); a
// Reply that rapid-commits one is taken when the Solicit asked for it.
func (c *Client) advertise(r *Request, seen *notes) func(m *dhcpv6.Message) (verdict, int) {
	return func(m *dhcpv6.Message) (verdict, int) {
		rapid := m.MessageType == dhcpv6.MessageTypeReply && m.GetOneOption(dhcpv6.OptionRapidCommit) != nil
		if m.MessageType != dhcpv6.MessageTypeAdvertise && !(c.rapid && rapid) {
			return skip, 0
		}
		if m.Options.ServerID() == nil {
			seen.add(fmt.Sprintf("ignored an %s without a server identifier (option 2)", m.MessageType))
			return skip, 0
		}
		if _, err := leaseFrom(m, r.IAID, netip.Addr{}, time.Now()); err != nil {
			seen.add(fmt.Sprintf("ignored an %s from server %x: %v", m.MessageType, m.Options.ServerID().ToBytes(), err))
			return skip, 0
		}
		if rapid {
			return take, 0
		}
		pref := int(m.Options.Preference())
		if pref == 255 {
			return take, pref
		}
		return keep, pref
	}
}

// kind is the sentinel of an Acquire that refused everything: NoAddrsAvail
// when every refusal was that, else ErrUnusable.
func kind(refused []string) error {
	for _, s := range refused {
		if !strings.Contains(s, iana.StatusNoAddrsAvail.String()) {
			return ErrUnusable
		}
	}
	return ErrNoAddrsAvail
}

// acquireFailed explains an Acquire that ends without a lease.
func (c *Client) acquireFailed(ctx context.Context, err error, start time.Time, r Request, refused []string, seen notes, what string) error {
	if ctx.Err() != nil && len(refused) > 0 {
		return fmt.Errorf("%w: DHCPv6 lease for %s on parent %s: refused within %s: %s%s: fix the DHCPv6 server's configuration, or give it more time: %w",
			kind(refused), r.who(), r.Parent, time.Since(start).Round(time.Millisecond), strings.Join(refused, "; "), seen, ctx.Err())
	}
	return failed(ctx, err, start, fmt.Sprintf("%s on parent %s for %s", what, r.Parent, r.who()), seen)
}
