package rawlink

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Framing. Every frame is built here, Ethernet header included, so that
// its source is the endpoint's MAC (a switch with DHCP snooping's MAC
// check drops a client's frames from another) and its IP source what the
// protocol says; the protocol packages encode only their messages.

// Header sizes, EtherTypes and IP protocol numbers.
const (
	EthHeader   = 14
	IPv4Header  = 20 // without options
	IPv6Header  = 40
	UDPHeader   = 8
	EtherIPv4   = 0x0800
	EtherARP    = 0x0806
	EtherIPv6   = 0x86dd
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// BroadcastMAC is the Ethernet broadcast address.
var BroadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Ethernet fills the Ethernet header of frame b: dst, src, EtherType typ.
func Ethernet(b []byte, dst, src net.HardwareAddr, typ uint16) {
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:14], typ)
}

// UDP4 wraps payload in UDP (sport → dport), IPv4 (src → dst, TTL 64,
// no options) and Ethernet (srcMAC → dstMAC), with both checksums.
func UDP4(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, EthHeader+IPv4Header+UDPHeader+len(payload))
	Ethernet(b, dstMAC, srcMAC, EtherIPv4)
	ip := b[EthHeader : EthHeader+IPv4Header]
	ip[0] = 0x45 // version 4, 20-byte header
	binary.BigEndian.PutUint16(ip[2:4], uint16(IPv4Header+UDPHeader+len(payload)))
	ip[8] = 64 // TTL
	ip[9] = ProtoUDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:12], ^Sum(ip, 0))
	udp(b[EthHeader+IPv4Header:], sport, dport, payload, PseudoSum(src, dst, ProtoUDP, UDPHeader+len(payload)))
	return b
}

// UDP6 wraps payload in UDP (sport → dport), IPv6 (src → dst, hop limit
// 1 to a multicast group, 64 otherwise) and Ethernet (srcMAC → dstMAC),
// with the UDP checksum.
func UDP6(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	hop := byte(64)
	if dst.IsMulticast() {
		hop = 1
	}
	b := make([]byte, EthHeader+IPv6Header+UDPHeader+len(payload))
	IPv6(b, srcMAC, dstMAC, src, dst, ProtoUDP, hop, UDPHeader+len(payload))
	udp(b[EthHeader+IPv6Header:], sport, dport, payload, PseudoSum(src, dst, ProtoUDP, UDPHeader+len(payload)))
	return b
}

// udp fills UDP header and payload in b, pseudo being the sum of the
// IP pseudo header.
func udp(b []byte, sport, dport uint16, payload []byte, pseudo uint32) {
	binary.BigEndian.PutUint16(b[0:2], sport)
	binary.BigEndian.PutUint16(b[2:4], dport)
	binary.BigEndian.PutUint16(b[4:6], uint16(len(b)))
	copy(b[UDPHeader:], payload)
	c := ^Sum(b, pseudo)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" (RFC 768), and is not allowed over IPv6 (RFC 8200 section 8.1)
	}
	binary.BigEndian.PutUint16(b[6:8], c)
}

// IPv6 fills the Ethernet and IPv6 headers of frame b (srcMAC → dstMAC,
// src → dst, next header proto, hop limit hop, payload length plen).
func IPv6(b []byte, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, proto, hop byte, plen int) {
	Ethernet(b, dstMAC, srcMAC, EtherIPv6)
	ip := b[EthHeader : EthHeader+IPv6Header]
	ip[0] = 0x60 // version 6, traffic class and flow label 0
	binary.BigEndian.PutUint16(ip[4:6], uint16(plen))
	ip[6], ip[7] = proto, hop
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
}

// ICMPv6 frames the ICMPv6 message m (its checksum field is set here)
// from srcMAC and src to dstMAC and dst, with hop limit hop.
func ICMPv6(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, hop byte, m []byte) []byte {
	b := make([]byte, EthHeader+IPv6Header+len(m))
	IPv6(b, srcMAC, dstMAC, src, dst, ProtoICMPv6, hop, len(m))
	icmp := b[EthHeader+IPv6Header:]
	copy(icmp, m)
	binary.BigEndian.PutUint16(icmp[2:4], ICMPv6Checksum(src, dst, icmp))
	return b
}

// Neighbour Discovery (RFC 4861) message types, flags and options.
const (
	NDPSolicitation  = 135
	NDPAdvertisement = 136
	NASolicited      = 0x40 // flags byte of an NA: R 0x80, S 0x40, O 0x20
	NAOverride       = 0x20
	OptSourceLL      = 1
	OptTargetLL      = 2
	NDPBodyLen       = 24 // type, code, checksum, flags/reserved, target
	NDPHopLimit      = 255
	LLOptionLen      = 8 // an Ethernet link-layer address option
)

// Advertisement is a Neighbour Advertisement for target held by mac, with
// flags (NASolicited, NAOverride) and a target link-layer address option
// mac, from target to dst at dstMAC, hop limit 255.
func Advertisement(mac, dstMAC net.HardwareAddr, target, dst netip.Addr, flags byte) []byte {
	m := make([]byte, NDPBodyLen+LLOptionLen)
	m[0] = NDPAdvertisement
	m[4] = flags
	t := target.As16()
	copy(m[8:24], t[:])
	m[24], m[25] = OptTargetLL, 1 // length in units of 8 bytes
	copy(m[26:32], mac)
	return ICMPv6(mac, dstMAC, target, dst, NDPHopLimit, m)
}

// Sum is the one's complement sum of b (RFC 1071), starting from acc: a
// header or datagram whose checksum field is set verifies when its Sum
// (with the pseudo header's, for UDP and ICMPv6) is 0xffff.
func Sum(b []byte, acc uint32) uint16 {
	for len(b) >= 2 {
		acc += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return fold(acc)
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// PseudoSum is the sum of the pseudo header of a UDP datagram or ICMPv6
// message of length bytes from src to dst: IPv4's (RFC 768) for IPv4
// addresses, IPv6's (RFC 8200 section 8.1) for IPv6 ones.
func PseudoSum(src, dst netip.Addr, proto byte, length int) uint32 {
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		return uint32(Sum(s[:], 0)) + uint32(Sum(d[:], 0)) + uint32(proto) + uint32(length)
	}
	s, d := src.As16(), dst.As16()
	return uint32(Sum(s[:], 0)) + uint32(Sum(d[:], 0)) + uint32(proto) + uint32(length)
}

// ICMPv6Checksum is the checksum of ICMPv6 message m from src to dst
// (RFC 4443 section 2.3), m's checksum field counted as zero.
func ICMPv6Checksum(src, dst netip.Addr, m []byte) uint16 {
	acc := PseudoSum(src, dst, ProtoICMPv6, len(m)) + uint32(Sum(m, 0))
	if len(m) >= 4 {
		acc += 0xffff - uint32(binary.BigEndian.Uint16(m[2:4])) // take the field out
	}
	return ^fold(acc)
}

// MulticastMAC is the Ethernet address of IPv6 multicast group g (RFC
// 2464 section 7): 33:33 and g's last four bytes.
func MulticastMAC(g netip.Addr) net.HardwareAddr {
	a := g.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// SolicitedNode is addr's solicited-node multicast address
// ff02::1:ffXX:XXXX (RFC 4291 section 2.7.1), where Neighbour
// Solicitations for addr go.
func SolicitedNode(addr netip.Addr) netip.Addr {
	a := addr.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// Packet is an IP packet read out of an untagged Ethernet frame. Its
// slices point into the frame.
type Packet struct {
	DstMAC, SrcMAC net.HardwareAddr
	Src, Dst       netip.Addr
	// Proto is IPv4's protocol or IPv6's next header (extension headers
	// are not followed).
	Proto byte
	// HopLimit is IPv4's TTL or IPv6's hop limit.
	HopLimit byte
	// Payload is what follows the IP header, as long as the IP header
	// says (padding cut off).
	Payload []byte
	// FirstFragment is set on an IPv4 packet with More Fragments and
	// offset 0; a later fragment is not a Packet.
	FirstFragment bool
}

// Parse reads an IPv4 or IPv6 packet out of an Ethernet frame; ok is
// false for anything else, truncated or malformed, and for an IPv4
// fragment other than the first. Checksums are not checked: on a veth
// the kernel hands packet sockets frames whose checksum is left to
// offload.
func Parse(f []byte) (p Packet, ok bool) {
	if len(f) < EthHeader {
		return p, false
	}
	p.DstMAC, p.SrcMAC = net.HardwareAddr(f[0:6]), net.HardwareAddr(f[6:12])
	ip := f[EthHeader:]
	switch binary.BigEndian.Uint16(f[12:14]) {
	case EtherIPv4:
		if len(ip) < IPv4Header || ip[0]>>4 != 4 {
			return p, false
		}
		hlen, tlen := int(ip[0]&0x0f)*4, int(binary.BigEndian.Uint16(ip[2:4]))
		if hlen < IPv4Header || hlen > tlen || tlen > len(ip) {
			return p, false
		}
		frag := binary.BigEndian.Uint16(ip[6:8])
		if frag&0x1fff != 0 {
			return p, false
		}
		p.FirstFragment = frag&0x2000 != 0
		p.Src, p.Dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		p.Proto, p.HopLimit, p.Payload = ip[9], ip[8], ip[hlen:tlen]
		return p, true
	case EtherIPv6:
		if len(ip) < IPv6Header || ip[0]>>4 != 6 {
			return p, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:6]))
		if IPv6Header+plen > len(ip) {
			return p, false
		}
		p.Src, p.Dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		p.Proto, p.HopLimit, p.Payload = ip[6], ip[7], ip[IPv6Header:IPv6Header+plen]
		return p, true
	}
	return p, false
}

// Datagram is a UDP datagram read out of a frame.
type Datagram struct {
	Packet
	SrcPort, DstPort uint16
	// Length is the UDP header's length: of the whole datagram, which
	// for a first fragment is more than Data holds.
	Length int
	// Data is the datagram's payload (for a first fragment, what of it
	// the fragment carries).
	Data []byte
}

// ParseUDP reads a UDP datagram to port out of an Ethernet frame; ok is
// false for anything else, truncated or malformed (Parse's rules; the
// UDP length must fit the IP payload, except in a first fragment).
func ParseUDP(f []byte, port uint16) (d Datagram, ok bool) {
	p, ok := Parse(f)
	if !ok || p.Proto != ProtoUDP || len(p.Payload) < UDPHeader {
		return d, false
	}
	u := p.Payload
	d = Datagram{Packet: p, SrcPort: binary.BigEndian.Uint16(u[0:2]), DstPort: binary.BigEndian.Uint16(u[2:4]),
		Length: int(binary.BigEndian.Uint16(u[4:6]))}
	if d.DstPort != port || d.Length < UDPHeader {
		return d, false
	}
	if p.FirstFragment {
		d.Data = u[UDPHeader:]
		return d, true
	}
	if d.Length > len(u) {
		return d, false
	}
	d.Data = u[UDPHeader:d.Length]
	return d, true
}

// Solicitation is the target of a Neighbour Solicitation in frame f
// (ICMPv6 code 0, hop limit 255, at least the NS's 24 bytes, checksum not
// checked), with the packet it came in; ok is false for anything else.
func Solicitation(f []byte) (target netip.Addr, p Packet, ok bool) {
	p, ok = Parse(f)
	if !ok || !p.Src.Is6() || p.Proto != ProtoICMPv6 || p.HopLimit != NDPHopLimit || len(p.Payload) < NDPBodyLen ||
		p.Payload[0] != NDPSolicitation || p.Payload[1] != 0 {
		return target, p, false
	}
	return netip.AddrFrom16([16]byte(p.Payload[8:24])), p, true
}

// Decode runs a library's decoder on b; ok is false when it fails, or
// panics (a malformed packet from the LAN is dropped, never a crash).
func Decode[M any](b []byte, decode func([]byte) (M, error)) (m M, ok bool) {
	defer func() {
		if recover() != nil {
			var zero M
			m, ok = zero, false
		}
	}()
	m, err := decode(b)
	return m, err == nil
}
