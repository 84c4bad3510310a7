package dhcp

import (
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
)

// The framing the tests build their frames with is package rawlink's.
const (
	ethHeader  = rawlink.EthHeader
	ipv4Header = rawlink.IPv4Header
	udpHeader  = rawlink.UDPHeader
)

var broadcastMAC = rawlink.BroadcastMAC

// udpFrame wraps payload in UDP (sport → dport), IPv4 (src → dst) and
// Ethernet (srcMAC → broadcast).
func udpFrame(srcMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return rawlink.UDP4(srcMAC, broadcastMAC, src, dst, sport, dport, payload)
}

// sum is rawlink.Sum.
func sum(b []byte, acc uint32) uint16 { return rawlink.Sum(b, acc) }
