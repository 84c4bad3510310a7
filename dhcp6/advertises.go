package dhcp6

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// Advertisement is one server's Advertise to a Solicit of Advertises.
type Advertisement struct {
	// ServerID is the server's DUID (option 2) as sent.
	ServerID []byte
	// ServerMAC and Source are the Ethernet and IPv6 sources of the
	// Advertise.
	ServerMAC net.HardwareAddr
	Source    netip.Addr
	// Addrs are the addresses of its IA_NAs, as sent (not judged).
	Addrs []netip.Addr
	// Status, when no address is advertised, is the status code other
	// than Success (the IA_NA's, else the message's) as "NoAddrsAvail:
	// its message"; otherwise "".
	Status string
}

// Advertises asks the DHCPv6 servers of r.Parent's LAN what they would
// lease r, without leasing anything: it sends a Solicit as Acquire does
// (from r.MAC and r.LinkLocal, with r.DUID, an IA_NA of r.IAID, r.Hint
// and r.Hostname, never Rapid Commit), retransmits it on the client's
// schedule (WithRetransmit: 1 s, then doubled, ±10%), and collects every
// Advertise to it until ctx ends. Nothing is sent but Solicits and the
// Neighbour Advertisements that answer servers' solicitations for
// r.LinkLocal (as Acquire's): no Request, so no server binds an address
// to r. Advertisements are distinct by server DUID: a server that
// answers the Solicit and its retransmission counts once (its last
// Advertise is kept). They are in the order the servers first answered.
//
// The end of ctx is not an error: the advertisements (none when no
// server answered) are the result. The error says that r is malformed,
// or that the parent's socket could not be opened or a Solicit not sent
// (a missing or down parent); the advertisements collected before a
// failed retransmission are returned with it.
func (c *Client) Advertises(ctx context.Context, r Request) ([]Advertisement, error) {
	p, done, err := c.take(&r, "DHCPv6 advertisements")
	if err != nil {
		return nil, err
	}
	defer done()
	if ctx.Err() != nil { // nothing could be collected: nothing is sent
		return nil, nil
	}
	var advs []Advertisement
	_, _, err = c.run(ctx, p, &r, exchange{typ: dhcpv6.MessageTypeSolicit, addr: r.Hint,
		accept: func(*dhcpv6.Message) (verdict, int) { return skip, 0 },
		saw: func(rep reply) {
			if rep.m.MessageType != dhcpv6.MessageTypeAdvertise {
				return
			}
			a, ok := advertisementOf(rep)
			if !ok {
				return
			}
			c.log.Debug("dhcp6 advertise", "parent", r.Parent, "mac", r.MAC.String(), "server", fmt.Sprintf("%x", a.ServerID),
				"source", a.Source.String(), "addresses", fmt.Sprint(a.Addrs), "status", a.Status)
			for i := range advs {
				if bytes.Equal(advs[i].ServerID, a.ServerID) {
					advs[i] = a
					return
				}
			}
			advs = append(advs, a)
		}})
	if err != nil && ctx.Err() == nil {
		return advs, fmt.Errorf("DHCPv6 advertisements on parent %s for %s: %w", r.Parent, r.who(), err)
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		return advs, err
	}
	return advs, nil
}

// advertisementOf reads an Advertise; ok is false for one without a
// server identifier (RFC 8415 section 16.3 has clients discard it).
func advertisementOf(rep reply) (Advertisement, bool) {
	m := rep.m
	sid := m.Options.ServerID()
	if sid == nil {
		return Advertisement{}, false
	}
	a := Advertisement{ServerID: sid.ToBytes(), ServerMAC: bytes.Clone(rep.srcMAC), Source: rep.src}
	var status *dhcpv6.OptStatusCode
	for _, ia := range m.Options.IANA() {
		for _, x := range ia.Options.Addresses() {
			if addr, ok := netip.AddrFromSlice(x.IPv6Addr); ok {
				a.Addrs = append(a.Addrs, addr)
			}
		}
		if s := ia.Options.Status(); s != nil && status == nil {
			status = s
		}
	}
	if status == nil {
		status = m.Options.Status()
	}
	if len(a.Addrs) == 0 && status != nil && status.StatusCode != iana.StatusSuccess {
		a.Status = status.StatusCode.String()
		if msg := strings.TrimSpace(status.StatusMessage); msg != "" {
			a.Status += ": " + msg
		}
	}
	return a, true
}
