package dhcp

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Request says for whom a lease is.
type Request struct {
	// Parent is the link (in the client's namespace) on the server's LAN.
	Parent string
	// MAC is chaddr, and the source of the frames: the endpoint's own MAC
	// for macvlan, the parent's MAC for ipvlan.
	MAC net.HardwareAddr
	// ClientID is option 61 as sent (type byte first, RFC 2132 section
	// 9.14): unique and stable per endpoint. Required for ipvlan, whose
	// endpoints share the parent's MAC; optional for macvlan.
	ClientID []byte
	// Hostname is option 12, optional.
	Hostname string
	// FQDN sends Hostname in the Client FQDN option (81, RFC 4702) too:
	// a partial name in wire format, the server asked to update DNS.
	FQDN bool
	// Address, optional, is the address to ask for again (option 50 in the
	// DISCOVER), e.g. the expired lease's after a restart.
	Address netip.Addr
	// Only, optional, makes Acquire ask for this address (option 50, in
	// place of Address) and take no other: an OFFER of another address is
	// not REQUESTed, and if none of Only comes before the context ends
	// the error wraps ErrNotOffered and names what was offered instead.
	// For an endpoint that lost its lease and cannot change address.
	Only netip.Addr
}

// ClientIDFromName is a client identifier of type 0 (not a hardware
// address) holding name, e.g. one made of the endpoint's ID.
func ClientIDFromName(name string) []byte { return append([]byte{0}, name...) }

// check refuses a request no server could answer usefully.
func (r Request) check() error {
	switch {
	case r.Parent == "" || len(r.Parent) > 15:
		return fmt.Errorf("parent %q is not a link name (1 to 15 bytes): give the parent link of the endpoint", r.Parent)
	case len(r.MAC) != 6 || r.MAC[0]&1 == 1 || [6]byte(r.MAC) == [6]byte{}:
		return fmt.Errorf("MAC %q is not an Ethernet unicast address: give the endpoint's MAC (macvlan) or the parent's (ipvlan)", r.MAC)
	case r.ClientID != nil && (len(r.ClientID) < 2 || len(r.ClientID) > 255):
		return fmt.Errorf("client ID %x is %d bytes: option 61 holds 2 to 255 (a type byte and at least one more)", r.ClientID, len(r.ClientID))
	case len(r.Hostname) > 255:
		return fmt.Errorf("hostname of %d bytes is too long for option 12 (at most 255): shorten it", len(r.Hostname))
	case r.Address.IsValid() && !r.Address.Is4():
		return fmt.Errorf("address %s to ask for is not IPv4: DHCPv4 leases IPv4 addresses only", r.Address)
	case r.Only.IsValid() && (!r.Only.Is4() || r.Only.IsUnspecified()):
		return fmt.Errorf("the only address to take, %s, is not an IPv4 unicast address: DHCPv4 leases IPv4 addresses only", r.Only)
	}
	return nil
}

// who names the client in errors and logs.
func (r Request) who() string {
	if r.ClientID != nil {
		return fmt.Sprintf("MAC %s client ID %x", r.MAC, r.ClientID)
	}
	return "MAC " + r.MAC.String()
}

// requested are the options every request asks for (option 55).
var requested = []dhcpv4.OptionCode{
	dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
	dhcpv4.OptionDomainName, dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionServerIdentifier,
	dhcpv4.OptionRenewTimeValue, dhcpv4.OptionRebindingTimeValue, dhcpv4.OptionClasslessStaticRoute,
}

// maxMessageSize is option 57: what a reply may be (an Ethernet MTU).
const maxMessageSize = 1500

// message builds a client message for r. Every message that is answered
// (all but a RELEASE and a DECLINE) has the BROADCAST flag, so that the
// server answers by broadcast: the parent receives a broadcast, but a
// unicast to a macvlan child's MAC goes to the child (see the package
// documentation); those also ask for options (55, 57, 12), which RFC 2131
// table 5 has a RELEASE and a DECLINE leave out.
func message(r Request, xid dhcpv4.TransactionID, t dhcpv4.MessageType, extra ...dhcpv4.Modifier) (*dhcpv4.DHCPv4, error) {
	answered := t != dhcpv4.MessageTypeRelease && t != dhcpv4.MessageTypeDecline
	mods := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(xid),
		dhcpv4.WithHwAddr(r.MAC),
		dhcpv4.WithMessageType(t),
		dhcpv4.WithBroadcast(answered),
	}
	if r.ClientID != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientIdentifier(r.ClientID)))
	}
	if answered {
		mods = append(mods, dhcpv4.WithRequestedOptions(requested...),
			dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(maxMessageSize)))
		if r.Hostname != "" {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(r.Hostname)))
		}
		if r.Hostname != "" && r.FQDN {
			mods = append(mods, dhcpv4.WithOption(clientFQDN(r.Hostname)))
		}
	}
	m, err := dhcpv4.New(append(mods, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("build DHCP%s for %s: %w", t, r.who(), err)
	}
	return m, nil
}

// discover is a DHCPDISCOVER, asking for r.Only, else r.Address, when set.
func discover(r Request, xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) {
	var extra []dhcpv4.Modifier
	if want := cmp.Or(r.Only, r.Address); want.IsValid() {
		extra = append(extra, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(want.AsSlice())))
	}
	return message(r, xid, dhcpv4.MessageTypeDiscover, extra...)
}

// request is a DHCPREQUEST for addr with ciaddr 0: in the SELECTING state
// (RFC 2131 section 4.3.2) when server is set, for an OFFER and for a
// renewal with the server that granted the lease; INIT-REBOOT style when
// it is not, for rebinding with any server. Either way the server answers
// by broadcast; a RENEWING request (ciaddr set) would be answered by
// unicast to ciaddr, which the parent does not receive.
func request(r Request, xid dhcpv4.TransactionID, addr, server netip.Addr) (*dhcpv4.DHCPv4, error) {
	extra := []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(addr.AsSlice()))}
	if server.IsValid() {
		extra = append(extra, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())))
	}
	return message(r, xid, dhcpv4.MessageTypeRequest, extra...)
}

// release is a DHCPRELEASE of addr (ciaddr the leased address, option 54
// its server, RFC 2131 section 4.4.6).
func release(r Request, xid dhcpv4.TransactionID, addr, server netip.Addr) (*dhcpv4.DHCPv4, error) {
	return message(r, xid, dhcpv4.MessageTypeRelease,
		dhcpv4.WithClientIP(addr.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())))
}

// decline is a DHCPDECLINE of addr to server (RFC 2131 section 4.4.1 and
// table 5: ciaddr 0, option 50 the address, option 54 the server, option
// 56 why).
func decline(r Request, xid dhcpv4.TransactionID, addr, server netip.Addr, why string) (*dhcpv4.DHCPv4, error) {
	extra := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(addr.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())),
	}
	if why != "" {
		extra = append(extra, dhcpv4.WithOption(dhcpv4.OptMessage(why)))
	}
	return message(r, xid, dhcpv4.MessageTypeDecline, extra...)
}

// mine reports whether a reply answers the client of r: a BOOTREPLY with
// its chaddr and, when the reply carries option 61, its client ID (RFC
// 6842 has servers echo it; ipvlan endpoints differ only there).
func mine(r Request, m *dhcpv4.DHCPv4) bool {
	if m.OpCode != dhcpv4.OpcodeBootReply || m.HWType != 1 || len(m.ClientHWAddr) != 6 || [6]byte(m.ClientHWAddr) != [6]byte(r.MAC) {
		return false
	}
	if id := m.Options.Get(dhcpv4.OptionClientIdentifier); id != nil && string(id) != string(r.ClientID) {
		return false
	}
	return true
}

// clientFQDN is option 81 (RFC 4702 section 2) of a partial name: flags
// S (the server updates the A record) and E (the name in wire format),
// RCODE1 and RCODE2 0, then the name as one DNS label without the
// terminating zero (a partial name, section 2.3.1).
func clientFQDN(label string) dhcpv4.Option {
	if len(label) > 63 {
		label = label[:63]
	}
	data := append([]byte{0x05, 0, 0, byte(len(label))}, label...)
	return dhcpv4.Option{Code: dhcpv4.OptionFQDN, Value: dhcpv4.OptionGeneric{Data: data}}
}
