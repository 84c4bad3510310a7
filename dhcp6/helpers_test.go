package dhcp6

import (
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
)

// The framing the tests build and read their frames with is package
// rawlink's.
const (
	ethHeader  = rawlink.EthHeader
	ipv6Header = rawlink.IPv6Header
	udpHeader  = rawlink.UDPHeader
	etherIPv6  = rawlink.EtherIPv6
	protoUDP   = rawlink.ProtoUDP
	protoICMP6 = rawlink.ProtoICMPv6
)

// udpFrame is rawlink.UDP6.
func udpFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return rawlink.UDP6(srcMAC, dstMAC, src, dst, sport, dport, payload)
}

// ipHeader is rawlink.IPv6.
func ipHeader(b []byte, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, proto, hop byte, plen int) {
	rawlink.IPv6(b, srcMAC, dstMAC, src, dst, proto, hop, plen)
}

// sum and pseudo are rawlink.Sum and rawlink.PseudoSum.
func sum(b []byte, acc uint32) uint16 { return rawlink.Sum(b, acc) }

func pseudo(src, dst netip.Addr, proto byte, length int) uint32 {
	return rawlink.PseudoSum(src, dst, proto, length)
}

// solicitedNodeMAC is the Ethernet group of addr's solicited-node
// multicast address.
func solicitedNodeMAC(addr netip.Addr) net.HardwareAddr {
	return rawlink.MulticastMAC(rawlink.SolicitedNode(addr))
}

// inbound is what the tests read out of a frame to the client.
type inbound struct {
	dstMAC net.HardwareAddr
	src    netip.Addr
	dhcp   []byte
}

// parseFrame reads a datagram to port 546 the way the client's demux
// does (rawlink.ParseUDP).
func parseFrame(f []byte) (inbound, bool) {
	d, ok := rawlink.ParseUDP(f, clientPort)
	return inbound{dstMAC: d.DstMAC, src: d.Src, dhcp: d.Data}, ok && d.Src.Is6() && len(d.Data) >= 4
}
