package dhcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Offer is one server's DHCPOFFER to a DISCOVER of Offers.
type Offer struct {
	// Server is the server identifier (option 54); the zero Addr when
	// the OFFER has none. ServerMAC is the Ethernet source of the OFFER.
	Server    netip.Addr
	ServerMAC net.HardwareAddr
	// Addr is the address offered (yiaddr) with the length of the subnet
	// mask (option 1); without option 1 the classful length Acquire would
	// take, with a malformed one /32. The zero Prefix when yiaddr is 0.
	Addr netip.Prefix
	// Router is option 3's first router; the zero Addr without one.
	Router netip.Addr
	// LeaseTime is option 51 (Infinite for 0xffffffff); 0 without one.
	LeaseTime time.Duration
}

// Offers asks the DHCP servers of r.Parent's LAN what they would lease
// r, without leasing anything: it sends a DISCOVER as Acquire does (from
// and for r.MAC, with r.ClientID and r.Hostname; option 50 only when
// r.Address or r.Only is set), retransmits it on the client's schedule
// (WithRetransmit: 2 s, then doubled), and collects every OFFER to it
// until ctx ends. Nothing else is ever sent: no REQUEST, so no server
// holds a lease for r afterwards (a server may reserve the offered
// address for a short while, as for any DISCOVER). OFFERs are distinct
// by server identifier and Ethernet source: a server that answers the
// DISCOVER and its retransmission counts once (its first OFFER is kept).
// They are in the order they came.
//
// The end of ctx is not an error: the offers (none when no server
// answered) are the result. The error says that r is malformed, or that
// the parent's socket could not be opened or a DISCOVER not sent (a
// missing or down parent); the offers collected before a failed
// retransmission are returned with it.
func (c *Client) Offers(ctx context.Context, r Request) ([]Offer, error) {
	p, done, err := c.take(r, "DHCP offers")
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil { // nothing could be collected: nothing is sent
		done()
		return nil, nil
	}
	defer done()
	var offers []Offer
	_, _, err = c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) { return discover(r, xid) },
		func(m *dhcpv4.DHCPv4, from net.HardwareAddr) verdict {
			if m.MessageType() != dhcpv4.MessageTypeOffer {
				return skip
			}
			o := offerOf(m, from)
			for _, x := range offers {
				if x.Server == o.Server && bytes.Equal(x.ServerMAC, o.ServerMAC) {
					return skip
				}
			}
			offers = append(offers, o)
			c.log.Debug("dhcp offer", "parent", r.Parent, "mac", r.MAC.String(), "server", o.Server.String(),
				"server_mac", o.ServerMAC.String(), "address", o.Addr.String())
			return skip
		}, &notes{})
	if err != nil && ctx.Err() == nil {
		return offers, fmt.Errorf("DHCP offers on parent %s for %s: %w", r.Parent, r.who(), err)
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		return offers, err
	}
	return offers, nil
}

// offerOf reads an OFFER that came from the Ethernet source from.
func offerOf(m *dhcpv4.DHCPv4, from net.HardwareAddr) Offer {
	o := Offer{ServerMAC: bytes.Clone(from)}
	o.Server, _ = addr4(m.ServerIdentifier())
	if addr, ok := addr4(m.YourIPAddr); ok && !addr.IsUnspecified() {
		bits := 32
		if raw := m.Options.Get(dhcpv4.OptionSubnetMask); raw == nil {
			bits, _ = maskBits(m, addr)
		} else if ones, size := net.IPMask(raw).Size(); len(raw) == 4 && size == 32 {
			bits = ones
		}
		o.Addr = netip.PrefixFrom(addr, bits)
	}
	if rs := m.Router(); len(rs) > 0 {
		o.Router, _ = addr4(rs[0])
	}
	o.LeaseTime, _ = seconds(m, dhcpv4.OptionIPAddressLeaseTime)
	return o
}
