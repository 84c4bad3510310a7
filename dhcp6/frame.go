package dhcp6

import (
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
)

// Framing is package rawlink's: every frame is built there, Ethernet
// header included, so that its source is the endpoint's MAC and its IPv6
// source the endpoint's link-local address; the library (dhcpv6) encodes
// and decodes only the DHCPv6 messages.
const (
	clientPort = 546
	serverPort = 547
)

// allServers is All_DHCP_Relay_Agents_and_Servers (RFC 8415 section 7.1)
// and allServersMAC its Ethernet group (RFC 2464 section 7).
var (
	allServers    = netip.MustParseAddr("ff02::1:2")
	allServersMAC = rawlink.MulticastMAC(allServers)
)

// LinkLocal is the modified EUI-64 link-local address of mac (RFC 4291
// appendix A): the source of an endpoint's DHCPv6 messages unless its
// Request says another. It is the zero Addr for a MAC that is not 6 bytes.
func LinkLocal(mac net.HardwareAddr) netip.Addr {
	if len(mac) != 6 {
		return netip.Addr{}
	}
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}
