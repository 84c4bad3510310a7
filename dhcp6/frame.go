package dhcp6

import (
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

// Framing. Every frame is built here, Ethernet header included, so that
// its source is the endpoint's MAC and its IPv6 source the endpoint's
// link-local address: the library (dhcpv6) encodes and decodes only the
// DHCPv6 messages. ICMPv6 Neighbour Advertisements are marshalled, with
// their checksum, by golang.org/x/net/icmp.

const (
	ethHeader  = 14
	ipv6Header = 40
	udpHeader  = 8
	clientPort = 546
	serverPort = 547
	etherIPv6  = 0x86dd
	protoUDP   = 17
	protoICMP6 = 58
)

// allServers is All_DHCP_Relay_Agents_and_Servers (RFC 8415 section 7.1)
// and allServersMAC its Ethernet group (RFC 2464 section 7).
var (
	allServers    = netip.MustParseAddr("ff02::1:2")
	allServersMAC = net.HardwareAddr{0x33, 0x33, 0x00, 0x01, 0x00, 0x02}
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

// solicitedNodeMAC is the Ethernet group of addr's solicited-node
// multicast address ff02::1:ffXX:XXXX, where Neighbour Solicitations
// for addr go.
func solicitedNodeMAC(addr netip.Addr) net.HardwareAddr {
	a := addr.As16()
	return net.HardwareAddr{0x33, 0x33, 0xff, a[13], a[14], a[15]}
}

// udpFrame wraps payload in UDP (sport → dport), IPv6 (src → dst, hop
// limit 1 for multicast, 64 otherwise) and Ethernet (srcMAC → dstMAC).
func udpFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, ethHeader+ipv6Header+udpHeader+len(payload))
	udp := b[ethHeader+ipv6Header:]
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint16(udp[2:4], dport)
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	copy(udp[udpHeader:], payload)
	hop := byte(64)
	if dst.IsMulticast() {
		hop = 1
	}
	ipHeader(b, srcMAC, dstMAC, src, dst, protoUDP, hop, len(udp))
	c := ^sum(udp, pseudo(src, dst, protoUDP, len(udp)))
	if c == 0 {
		c = 0xffff // 0 is not allowed over IPv6 (RFC 8200 section 8.1)
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	return b
}

// ipHeader fills the Ethernet and IPv6 headers of b.
func ipHeader(b []byte, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, proto, hop byte, plen int) {
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:14], etherIPv6)
	ip := b[ethHeader : ethHeader+ipv6Header]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(plen))
	ip[6], ip[7] = proto, hop
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
}

// pseudo is the sum of the IPv6 pseudo header (RFC 8200 section 8.1).
func pseudo(src, dst netip.Addr, proto byte, length int) uint32 {
	s, d := src.As16(), dst.As16()
	acc := uint32(sum(s[:], 0)) + uint32(sum(d[:], 0))
	return acc + uint32(length) + uint32(proto)
}

// sum is the one's complement sum of b (RFC 1071), starting from acc.
func sum(b []byte, acc uint32) uint16 {
	for len(b) >= 2 {
		acc += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// naFrame is a solicited Neighbour Advertisement (RFC 4861 section
// 7.2.4: Solicited and Override set) for target at mac, from target to
// the soliciting node dst at dstMAC.
func naFrame(mac, dstMAC net.HardwareAddr, target, dst netip.Addr) []byte {
	body := make([]byte, 4+16+8)
	body[0] = 0x60 // S, O
	t := target.As16()
	copy(body[4:20], t[:])
	body[20], body[21] = 2, 1 // target link-layer address, 8 bytes
	copy(body[22:28], mac)
	m := icmp.Message{Type: ipv6.ICMPTypeNeighborAdvertisement, Body: &icmp.RawBody{Data: body}}
	icmpb, err := m.Marshal(icmp.IPv6PseudoHeader(target.AsSlice(), dst.AsSlice()))
	if err != nil {
		return nil // a RawBody always marshals
	}
	b := make([]byte, ethHeader+ipv6Header+len(icmpb))
	ipHeader(b, mac, dstMAC, target, dst, protoICMP6, 255, len(icmpb))
	copy(b[ethHeader+ipv6Header:], icmpb)
	return b
}

// inbound is what the receive loop reads out of a frame.
type inbound struct {
	dstMAC, srcMAC net.HardwareAddr
	src, dst       netip.Addr
	// dhcp is the UDP payload of a datagram to port 546.
	dhcp []byte
	// nsTarget is the target of a Neighbour Solicitation (hop limit 255,
	// from a unicast address), else the zero Addr.
	nsTarget netip.Addr
}

// parseFrame reads an untagged Ethernet frame carrying IPv6 with UDP to
// port 546 or an ICMPv6 Neighbour Solicitation; ok is false for anything
// else, truncated or malformed. Extension headers are not followed
// (servers send none). Checksums are not checked: on a veth the kernel
// hands packet sockets frames whose checksum is left to offload.
func parseFrame(f []byte) (in inbound, ok bool) {
	if len(f) < ethHeader+ipv6Header || binary.BigEndian.Uint16(f[12:14]) != etherIPv6 {
		return in, false
	}
	ip := f[ethHeader:]
	if ip[0]>>4 != 6 {
		return in, false
	}
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if ipv6Header+plen > len(ip) {
		return in, false
	}
	in.dstMAC, in.srcMAC = net.HardwareAddr(f[0:6]), net.HardwareAddr(f[6:12])
	in.src, in.dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	payload := ip[ipv6Header : ipv6Header+plen]
	switch ip[6] {
	case protoUDP:
		if len(payload) < udpHeader || binary.BigEndian.Uint16(payload[2:4]) != clientPort {
			return in, false
		}
		ulen := int(binary.BigEndian.Uint16(payload[4:6]))
		if ulen < udpHeader || ulen > len(payload) {
			return in, false
		}
		in.dhcp = payload[udpHeader:ulen]
		return in, len(in.dhcp) >= 4
	case protoICMP6:
		if len(payload) < 24 || payload[0] != byte(ipv6.ICMPTypeNeighborSolicitation) || payload[1] != 0 || ip[7] != 255 ||
			in.src.IsUnspecified() || in.src.IsMulticast() {
			return in, false
		}
		in.nsTarget = netip.AddrFrom16([16]byte(payload[8:24]))
		return in, true
	}
	return in, false
}
