package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/underlay-net/underlay/internal/rawlink"
)

// maxSends bounds the transmissions of a Release and a Decline (RFC 8415
// section 7.6: REL_MAX_RC and DEC_MAX_RC, 4).
const maxSends = 4

// Renew extends l with the server that granted it (Renew, RFC 8415
// section 18.2.4), for the same address, for as long as ctx allows: call
// it while Plan says Renewing. Fields the Reply leaves out (DNS) keep
// their values in l. A Reply that says NoBinding, leaves the address out
// or gives it a valid lifetime of 0 is an error wrapping ErrNoBinding:
// the address is not the endpoint's any more. Any other failure leaves l
// standing until it expires (retry at Plan's Next).
func (c *Client) Renew(ctx context.Context, l Lease, r Request) (Lease, error) {
	return c.extend(ctx, l, r, dhcpv6.MessageTypeRenew, l.ServerID)
}

// Rebind extends l with any server (Rebind, RFC 8415 section 18.2.5):
// call it while Plan says Rebinding. The lease's ServerID becomes the
// answering server's. Errors are Renew's.
func (c *Client) Rebind(ctx context.Context, l Lease, r Request) (Lease, error) {
	return c.extend(ctx, l, r, dhcpv6.MessageTypeRebind, nil)
}

func (c *Client) extend(ctx context.Context, l Lease, r Request, typ dhcpv6.MessageType, server []byte) (Lease, error) {
	if err := r.check(); err == nil && (!l.Addr.Is6() || len(l.ServerID) == 0) {
		return Lease{}, fmt.Errorf("%s DHCPv6 lease for %s: the lease lacks an IPv6 address (%v) or a server DUID (%x): Acquire one", typ, r.who(), l.Addr, l.ServerID)
	}
	p, done, err := c.take(&r, typ.String()+" DHCPv6 lease")
	if err != nil {
		return Lease{}, err
	}
	defer done()
	var seen notes
	rep, sent, err := c.run(ctx, p, &r, exchange{typ: typ, addr: l.Addr, server: server, accept: fromServer(server, &seen)})
	stands := fmt.Sprintf("the lease holds until %s", Plan(l, time.Now()).ExpiresAt.Format(time.RFC3339))
	if err != nil {
		return Lease{}, failed(ctx, err, sent, fmt.Sprintf("the %s of %s on parent %s for %s (%s)", typ, l.Addr, r.Parent, r.who(), stands), seen)
	}
	sid := rep.Options.ServerID().ToBytes()
	n, err := leaseFrom(rep, l.IAID, l.Addr, sent)
	var st *statusError
	var ref *refusal
	switch {
	case err == nil:
		if rep.GetOneOption(dhcpv6.OptionDNSRecursiveNameServer) == nil {
			n.DNS = l.DNS
		}
		return n, nil
	case errors.As(err, &st) && st.code == iana.StatusNoBinding:
		return Lease{}, fmt.Errorf("%w: server %x answered the %s of %s for %s on parent %s: %v: stop using the address and Acquire anew",
			ErrNoBinding, sid, typ, l.Addr, r.who(), r.Parent, err)
	case errors.As(err, &ref) && ianaOf(rep, l.IAID) != nil && !holds(rep, l):
		return Lease{}, fmt.Errorf("%w: server %x answered the %s of %s for %s on parent %s without that address, or with a valid lifetime of 0: stop using it and Acquire anew",
			ErrNoBinding, sid, typ, l.Addr, r.who(), r.Parent)
	case st != nil:
		return Lease{}, fmt.Errorf("%w: server %x answered the %s of %s for %s on parent %s: %v; %s",
			ErrRefused, sid, typ, l.Addr, r.who(), r.Parent, err, stands)
	}
	return Lease{}, fmt.Errorf("%w: server %x answered the %s of %s for %s on parent %s with what is refused: %w; %s",
		ErrUnusable, sid, typ, l.Addr, r.who(), r.Parent, err, stands)
}

// holds says whether the Reply's IA_NA for l holds l's address with a
// valid lifetime above 0.
func holds(m *dhcpv6.Message, l Lease) bool {
	ia := ianaOf(m, l.IAID)
	for _, a := range ia.Options.Addresses() {
		if a.IPv6Addr.Equal(l.Addr.AsSlice()) && a.ValidLifetime > 0 {
			return true
		}
	}
	return false
}

// Release gives l back to its server (Release, RFC 8415 section 18.2.7)
// and waits for its Reply, at most maxSends transmissions or until ctx
// ends. The endpoint stops using the address whatever the outcome: the
// error (ErrNoAnswer, or ErrRefused with the server's status) is for the
// log; the server frees the address when it expires.
func (c *Client) Release(ctx context.Context, l Lease, r Request) error {
	return c.giveBack(ctx, l, r, dhcpv6.MessageTypeRelease)
}

// Decline tells l's server that l's address is in use on the link
// (Decline, RFC 8415 section 18.2.8), e.g. after a duplicate address
// detection probe was answered, and waits for its Reply as Release does.
// The endpoint must not use the address; Acquire again for another.
func (c *Client) Decline(ctx context.Context, l Lease, r Request) error {
	return c.giveBack(ctx, l, r, dhcpv6.MessageTypeDecline)
}

func (c *Client) giveBack(ctx context.Context, l Lease, r Request, typ dhcpv6.MessageType) error {
	switch err := r.check(); {
	case err == nil && (!l.Addr.Is6() || len(l.ServerID) == 0):
		return fmt.Errorf("%s DHCPv6 lease for %s: the lease lacks an IPv6 address (%v) or a server DUID (%x)", typ, r.who(), l.Addr, l.ServerID)
	case err == nil && ctx.Err() != nil:
		return fmt.Errorf("%s %s on parent %s: %w", typ, l.Addr, r.Parent, ctx.Err())
	}
	p, done, err := c.take(&r, typ.String()+" DHCPv6 lease")
	if err != nil {
		return err
	}
	defer done()
	var seen notes
	rep, sent, err := c.run(ctx, p, &r, exchange{typ: typ, addr: l.Addr, server: l.ServerID, sends: maxSends, accept: fromServer(l.ServerID, &seen)})
	if err != nil {
		return failed(ctx, err, sent, fmt.Sprintf("the %s of %s on parent %s for %s (the server frees it when it expires)", typ, l.Addr, r.Parent, r.who()), seen)
	}
	if st := status(rep.Options.Status(), "the Reply"); st != nil {
		return fmt.Errorf("%w: server %x answered the %s of %s for %s on parent %s: %v: the server frees it when it expires",
			ErrRefused, l.ServerID, typ, l.Addr, r.who(), r.Parent, st)
	}
	return nil
}

// decline sends one Decline of addr to server and waits for no Reply:
// an Acquire that got an unusable address tells the server and moves on.
func (c *Client) decline(p *rawlink.Port[dhcpv6.TransactionID, reply], r *Request, addr netip.Addr, server []byte) error {
	xid, _ := p.Register(newXID)
	defer p.Unregister(xid)
	m, err := build(dhcpv6.MessageTypeDecline, xid, r, addr, server, 0, false)
	if err != nil {
		return err
	}
	if err := p.Send(frameOf(r, m)); err != nil {
		return fmt.Errorf("send DHCPv6 Decline of %s on parent %s: %w", addr, r.Parent, err)
	}
	c.log.Debug("dhcp6 sent", "type", "DECLINE", "parent", r.Parent, "xid", xid.String(), "mac", r.MAC.String(), "address", addr.String())
	return nil
}
