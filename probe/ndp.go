package probe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
)

// Neighbour Discovery over Ethernet (RFC 4861), framed here: unsolicited
// Neighbour Advertisements (§7.2.6) and duplicate address detection
// style Neighbour Solicitations from the unspecified address (RFC 4862
// §5.4.2). Extension headers are neither sent nor accepted.

const (
	icmpv6        = rawlink.ProtoICMPv6
	ndpNS         = rawlink.NDPSolicitation
	ndpNA         = rawlink.NDPAdvertisement
	ndpBodyLen    = rawlink.NDPBodyLen
	icmpOff       = ethHeader + rawlink.IPv6Header
	ndpTargetOff  = icmpOff + 8
	ipv6NextOff   = ethHeader + 6
	ndpMaxOptions = 64
)

// allNodes is ff02::1, where unsolicited advertisements and the answers
// to probes from the unspecified address go.
var allNodes = netip.AddrFrom16([16]byte{0xff, 0x02, 15: 1})

// naFrame is an unsolicited Neighbour Advertisement for addr from mac:
// from addr to ff02::1, override set, solicited and router clear, with
// addr as target and a target link-layer address option mac.
func naFrame(mac net.HardwareAddr, addr netip.Addr) []byte {
	return rawlink.Advertisement(mac, rawlink.MulticastMAC(allNodes), addr, allNodes, rawlink.NAOverride)
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
	g := rawlink.SolicitedNode(addr)
	return rawlink.ICMPv6(mac, rawlink.MulticastMAC(g), netip.IPv6Unspecified(), g, rawlink.NDPHopLimit, body)
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
	ip, ok := rawlink.Parse(b)
	if !ok || !ip.Src.Is6() || ip.Proto != icmpv6 || ip.HopLimit != rawlink.NDPHopLimit || len(ip.Payload) < ndpBodyLen {
		return p, false
	}
	m := ip.Payload
	if (m[0] != ndpNS && m[0] != ndpNA) || m[1] != 0 {
		return p, false
	}
	if rawlink.ICMPv6Checksum(ip.Src, ip.Dst, m) != binary.BigEndian.Uint16(m[2:4]) {
		return p, false
	}
	p = ndpPacket{typ: m[0], flags: m[4], eth: net.HardwareAddr(bytes.Clone(ip.SrcMAC)), src: ip.Src,
		target: netip.AddrFrom16([16]byte(m[8:24]))}
	opts := m[ndpBodyLen:]
	for n := 0; len(opts) >= 2 && n < ndpMaxOptions; n++ {
		size := int(opts[1]) * 8
		if size == 0 || size > len(opts) {
			return p, false // RFC 4861 §4.6: a zero length is invalid
		}
		if size == rawlink.LLOptionLen && (opts[0] == rawlink.OptSourceLL || opts[0] == rawlink.OptTargetLL) {
			ll := net.HardwareAddr(bytes.Clone(opts[2:8]))
			if opts[0] == rawlink.OptSourceLL {
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
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: rawlink.EtherIPv6, SkipFalse: toDrop},
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
