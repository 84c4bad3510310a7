package probe

import (
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
)

// The framing the tests build their frames with is package rawlink's.

func untagged(filter []bpf.Instruction) []bpf.Instruction { return rawlink.Untagged(filter) }

func multicastMAC(g netip.Addr) net.HardwareAddr { return rawlink.MulticastMAC(g) }

func solicitedNode(addr netip.Addr) netip.Addr { return rawlink.SolicitedNode(addr) }

func icmpv6Checksum(src, dst netip.Addr, m []byte) uint16 { return rawlink.ICMPv6Checksum(src, dst, m) }

// ndpFrame frames an ICMPv6 message body from mac and src to the
// multicast group dst, hop limit 255, and sets its checksum.
func ndpFrame(mac net.HardwareAddr, src, dst netip.Addr, body []byte) []byte {
	return rawlink.ICMPv6(mac, rawlink.MulticastMAC(dst), src, dst, rawlink.NDPHopLimit, body)
}

// Offsets and values in the frames.
const (
	ipv6HopOff  = ethHeader + 7
	ipv6SrcOff  = ethHeader + 8
	ipv6DstOff  = ethHeader + 24
	naOverride  = rawlink.NAOverride
	llOptionLen = rawlink.LLOptionLen
	optTargetLL = rawlink.OptTargetLL
)
