package dhcp6

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/underlay-net/underlay/internal/rawlink"
)

// Messages are built with the library's types: one IA_NA with the
// endpoint's IAID (T1 and T2 0: the server's choice), the address it is
// about in an IA Address (lifetimes 0, RFC 8415 section 21.6), the client
// identifier, the elapsed time (RFC 8415 section 21.9) and an option
// request for DNS servers.

// build returns a message of type typ with transaction ID xid for r,
// about addr (none when invalid), to server (a DUID, none when nil).
func build(typ dhcpv6.MessageType, xid dhcpv6.TransactionID, r *Request, addr netip.Addr, server []byte, elapsed time.Duration, rapid bool) (*dhcpv6.Message, error) {
	cid, err := dhcpv6.DUIDFromBytes(r.DUID)
	if err != nil {
		return nil, fmt.Errorf("client DUID %x: %w", r.DUID, err)
	}
	m := &dhcpv6.Message{MessageType: typ, TransactionID: xid}
	m.AddOption(dhcpv6.OptClientID(cid))
	if server != nil {
		sid, err := dhcpv6.DUIDFromBytes(server)
		if err != nil {
			return nil, fmt.Errorf("server DUID %x of the lease: %w: acquire a new lease", server, err)
		}
		m.AddOption(dhcpv6.OptServerID(sid))
	}
	m.AddOption(dhcpv6.OptElapsedTime(min(elapsed, 0xffff*10*time.Millisecond)))
	ia := &dhcpv6.OptIANA{IaId: r.IAID}
	if addr.IsValid() {
		ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: addr.AsSlice()})
	}
	m.AddOption(ia)
	if typ == dhcpv6.MessageTypeSolicit || typ == dhcpv6.MessageTypeRequest || typ == dhcpv6.MessageTypeRenew || typ == dhcpv6.MessageTypeRebind {
		m.AddOption(dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer))
		if r.Hostname != "" {
			m.AddOption(fqdn(r.Hostname))
		}
	}
	if rapid && typ == dhcpv6.MessageTypeSolicit {
		dhcpv6.WithRapidCommit(m)
	}
	return m, nil
}

// frameOf frames a message of r to All_DHCP_Relay_Agents_and_Servers.
// Every message goes there: RFC 8415 (sections 18.2 and 21.12) has
// clients unicast only to a server that sent a Server Unicast option,
// which this client ignores (see the package documentation).
func frameOf(r *Request, m *dhcpv6.Message) []byte {
	return rawlink.UDP6(r.MAC, allServersMAC, r.source(), allServers, clientPort, serverPort, m.ToBytes())
}

// fqdn is the Client FQDN option (39) of a partial name: the flags (S
// set: the server may update the name's AAAA record; RFC 4704 section
// 4.1), then the name as one DNS label without the terminating zero
// (section 4.2). The library's OptFQDN always writes a fully qualified
// name.
type fqdn string

func (fqdn) Code() dhcpv6.OptionCode { return dhcpv6.OptionFQDN }

func (f fqdn) ToBytes() []byte {
	label := string(f)
	if len(label) > 63 {
		label = label[:63]
	}
	return append([]byte{0x01, byte(len(label))}, label...)
}

func (f fqdn) String() string { return fmt.Sprintf("%s: %s", dhcpv6.OptionFQDN, string(f)) }

func (fqdn) FromBytes([]byte) error { return fmt.Errorf("the client FQDN option is only sent") }
