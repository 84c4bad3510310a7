package probe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/net/bpf"
)

// Neighbour Discovery over Ethernet (RFC 4861), framed here: unsolicited
// Neighbour Advertisements (§7.2.6) and duplicate address detection
// style Neighbour Solicitations from the unspecified address (RFC 4862
// §5.4.2). Extension headers are neither sent nor accepted.

const (
	etherIPv6     = 0x86dd
	ipv6Header    = 40
	icmpv6        = 58
	ndpNS         = 135
	ndpNA         = 136
	naOverride    = 0x20 // flags byte of an NA: R 0x80, S 0x40, O 0x20
	optSourceLL   = 1
	optTargetLL   = 2
	ndpBodyLen    = 24 // type, code, checksum, flags/reserved, target
	icmpOff       = ethHeader + ipv6Header
	ndpTargetOff  = icmpOff + 8
	ndpHopLimit   = 255
	ipv6NextOff   = ethHeader + 6
	ipv6HopOff    = ethHeader + 7
	ipv6SrcOff    = ethHeader + 8
	ipv6DstOff    = ethHeader + 24
	llOptionLen   = 8 // an Ethernet link-layer address option
	ndpMaxOptions = 64
)

// allNodes is ff02::1, where unsolicited advertisements and the answers
// to probes from the unspecified address go.
var allNodes = netip.AddrFrom16([16]byte{0xff, 0x02, 15: 1})

// solicitedNode is addr's solicited-node multicast address
// ff02::1:ffXX:XXXX (RFC 4291 §2.7.1).
func solicitedNode(addr netip.Addr) netip.Addr {
	a := addr.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// multicastMAC is the Ethernet address of IPv6 multicast group g
// (RFC 2464 §7): 33:33 and g's last four bytes.
func multicastMAC(g netip.Addr) net.HardwareAddr {
	a := g.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// ndpFrame frames an ICMPv6 message body (checksum zero) from mac and src
// to the multicast group dst, hop limit 255, and sets its checksum.
func ndpFrame(mac net.HardwareAddr, src, dst netip.Addr, body []byte) []byte {
	b := make([]byte, icmpOff+len(body))
	copy(b[0:6], multicastMAC(dst))
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:14], etherIPv6)
	ip := b[ethHeader:icmpOff]
	ip[0] = 0x60 // version 6, traffic class and flow label 0
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(body)))
	ip[6], ip[7] = icmpv6, ndpHopLimit
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	copy(b[icmpOff:], body)
	binary.BigEndian.PutUint16(b[icmpOff+2:icmpOff+4], icmpv6Checksum(src, dst, b[icmpOff:]))
	return b
}

// icmpv6Checksum is the checksum of ICMPv6 message m from src to dst
// (RFC 4443 §2.3), m's checksum field counted as zero.
func icmpv6Checksum(src, dst netip.Addr, m []byte) uint16 {
	s, d := src.As16(), dst.As16()
	acc := uint32(sum(s[:], 0)) + uint32(sum(d[:], 0)) + uint32(len(m)) + icmpv6
	acc += uint32(sum(m, 0))
	if len(m) >= 4 {
		acc += 0xffff - uint32(binary.BigEndian.Uint16(m[2:4])) // take the field out
	}
	return ^fold(acc)
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
	return fold(acc)
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// naFrame is an unsolicited Neighbour Advertisement for addr from mac:
// from addr to ff02::1, override set, solicited and router clear, with
// addr as target and a target link-layer address option mac.
func naFrame(mac net.HardwareAddr, addr netip.Addr) []byte {
	body := make([]byte, ndpBodyLen+llOptionLen)
	body[0] = ndpNA
	body[4] = naOverride
	t := addr.As16()
	copy(body[8:24], t[:])
	body[24], body[25] = optTargetLL, 1 // length in units of 8 bytes
	copy(body[26:32], mac)
	return ndpFrame(mac, addr, allNodes, body)
}

// dadFrame is a probe for addr from mac: a Neighbour Solicitation from
// the unspecified address to addr's solicited-node group, target addr,
// without a source link-layer address option (RFC 4861 §7.2.2 forbids it
// from ::).
func dadFrame(mac net.HardwareAddr, addr netip.Addr) []byte {
	body := make([]byte, ndpBodyLen)
	body[0] = ndpNS
	t := addr.As16()
	copy(body[8:24], t[:])
	return ndpFrame(mac, netip.IPv6Unspecified(), solicitedNode(addr), body)
}

// ndpPacket is what a conflict check reads of a received NS or NA.
type ndpPacket struct {
	typ      uint8
	flags    uint8
	eth      net.HardwareAddr // Ethernet source
	src      netip.Addr
	target   netip.Addr
	sll, tll net.HardwareAddr // link-layer address options, if any
}

// parseNDP decodes an NS or NA in IPv6 over Ethernet with a valid
// checksum, hop limit 255 and code 0 (RFC 4861 §7.1.1, §7.1.2); ok is
// false for anything else.
func parseNDP(b []byte) (p ndpPacket, ok bool) {
	if len(b) < icmpOff+ndpBodyLen || binary.BigEndian.Uint16(b[12:14]) != etherIPv6 {
		return p, false
	}
	ip := b[ethHeader:icmpOff]
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if ip[0]>>4 != 6 || ip[6] != icmpv6 || ip[7] != ndpHopLimit || plen < ndpBodyLen || icmpOff+plen > len(b) {
		return p, false
	}
	m := b[icmpOff : icmpOff+plen]
	if (m[0] != ndpNS && m[0] != ndpNA) || m[1] != 0 {
		return p, false
	}
	src := netip.AddrFrom16([16]byte(ip[8:24]))
	dst := netip.AddrFrom16([16]byte(ip[24:40]))
	if icmpv6Checksum(src, dst, m) != binary.BigEndian.Uint16(m[2:4]) {
		return p, false
	}
	p = ndpPacket{typ: m[0], flags: m[4], eth: net.HardwareAddr(bytes.Clone(b[6:12])), src: src,
		target: netip.AddrFrom16([16]byte(m[8:24]))}
	opts := m[ndpBodyLen:]
	for n := 0; len(opts) >= 2 && n < ndpMaxOptions; n++ {
		size := int(opts[1]) * 8
		if size == 0 || size > len(opts) {
			return p, false // RFC 4861 §4.6: a zero length is invalid
		}
		if size == llOptionLen && (opts[0] == optSourceLL || opts[0] == optTargetLL) {
			ll := net.HardwareAddr(bytes.Clone(opts[2:8]))
			if opts[0] == optSourceLL {
				p.sll = ll
			} else {
				p.tll = ll
			}
		}
		opts = opts[size:]
	}
	return p, true
}

// ndpConflict reports the conflict a received frame shows for a probe of
// addr from mac, or nil: a Neighbour Advertisement for addr whose target
// link-layer address (else its Ethernet source) is another MAC, or a
// Neighbour Solicitation for addr from the unspecified address by another
// MAC (a simultaneous probe, RFC 4862 §5.4.3).
func ndpConflict(b []byte, mac net.HardwareAddr, addr netip.Addr) *ConflictError {
	p, ok := parseNDP(b)
	if !ok || p.target != addr {
		return nil
	}
	switch {
	case p.typ == ndpNA:
		who := p.tll
		if who == nil {
			who = p.eth
		}
		if !bytes.Equal(who, mac) {
			return &ConflictError{Addr: addr, MAC: who, Seen: "a Neighbour Advertisement"}
		}
	case p.typ == ndpNS && p.src.IsUnspecified() && !bytes.Equal(p.eth, mac):
		return &ConflictError{Addr: addr, MAC: p.eth, Seen: "a duplicate address detection Neighbour Solicitation", Probing: true}
	}
	return nil
}

// ndpFilter keeps the frames ndpConflict may take for addr: IPv6 without
// extension headers carrying an ICMPv6 NS or NA whose target is addr.
func ndpFilter(addr netip.Addr) []bpf.Instruction {
	a := addr.As16()
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherIPv6, SkipFalse: toDrop},
		bpf.LoadAbsolute{Off: ipv6NextOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpv6, SkipFalse: toDrop},
		bpf.LoadAbsolute{Off: icmpOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: ndpNS, SkipTrue: toDrop},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: ndpNA, SkipTrue: toDrop},
	}
	for i := 0; i < 16; i += 4 {
		prog = append(prog,
			bpf.LoadAbsolute{Off: uint32(ndpTargetOff + i), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(a[i : i+4]), SkipFalse: toDrop})
	}
	return link(prog)
}
