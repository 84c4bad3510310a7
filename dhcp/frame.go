package dhcp

import (
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/net/bpf"
)

// Framing. Replies are read with the library's parser
// (nclient4.NewBroadcastUDPConn over ethConn, which drops the Ethernet
// header); requests are framed here, because the library's framing takes
// the parent's MAC as the Ethernet source and a macvlan endpoint's frames
// must come from the endpoint's MAC (chaddr), or a switch with DHCP
// snooping's MAC check drops them.

const (
	ethHeader  = 14
	ipv4Header = 20
	udpHeader  = 8
	clientPort = 68
	serverPort = 67
)

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// frame wraps a DHCP message in UDP (68 → 67), IPv4 (src → dst, TTL 64)
// and Ethernet (srcMAC → broadcast).
func frame(srcMAC net.HardwareAddr, src, dst netip.Addr, payload []byte) []byte {
	return udpFrame(srcMAC, src, dst, clientPort, serverPort, payload)
}

// udpFrame wraps payload in UDP (sport → dport), IPv4 (src → dst, TTL 64)
// and Ethernet (srcMAC → broadcast).
func udpFrame(srcMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, ethHeader+ipv4Header+udpHeader+len(payload))
	copy(b[0:6], broadcastMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:14], 0x0800)

	ip := b[ethHeader : ethHeader+ipv4Header]
	ip[0] = 0x45 // version 4, 20-byte header
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4Header+udpHeader+len(payload)))
	ip[8] = 64 // TTL
	ip[9] = 17 // UDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:12], ^sum(ip, 0))

	udp := b[ethHeader+ipv4Header:]
	binary.BigEndian.PutUint16(udp[0:2], sport)
	binary.BigEndian.PutUint16(udp[2:4], dport)
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	copy(udp[udpHeader:], payload)
	// The pseudo header: addresses, protocol, UDP length.
	pseudo := sum(ip[12:20], 17+uint32(len(udp)))
	c := ^sum(udp, uint32(pseudo))
	if c == 0 {
		c = 0xffff // 0 means "no checksum" (RFC 768)
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	return b
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

// ethConn is the packet socket as the library's parser wants it: reads
// return the IPv4 packet without the Ethernet header (too short frames
// are skipped; a zero-length read would be taken for EOF). IPv4
// fragments are skipped too (the library would parse a first fragment as
// a truncated datagram): fragment, if set, is shown each first.
type ethConn struct {
	net.PacketConn
	fragment func(ip []byte)
}

func (c ethConn) ReadFrom(b []byte) (int, net.Addr, error) {
	buf := make([]byte, ethHeader+len(b))
	for {
		n, addr, err := c.PacketConn.ReadFrom(buf)
		if err != nil {
			return 0, addr, err
		}
		if n <= ethHeader || binary.BigEndian.Uint16(buf[12:14]) != 0x0800 {
			continue
		}
		ip := buf[ethHeader:n]
		if len(ip) >= ipv4Header && binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // More Fragments, or an offset
			if c.fragment != nil {
				c.fragment(ip)
			}
			continue
		}
		return copy(b, ip), addr, nil
	}
}

// firstFragment reads, from an IPv4 packet that is the first fragment of
// a UDP datagram to port 68, the DHCP xid, the source and the datagram's
// whole length (the UDP header's); ok is false for any other packet.
func firstFragment(ip []byte) (xid [4]byte, src netip.Addr, size int, ok bool) {
	if len(ip) < ipv4Header || ip[0]>>4 != 4 || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0x2000 {
		return xid, src, 0, false
	}
	udp := ip[min(int(ip[0]&0x0f)*4, len(ip)):]
	if len(udp) < udpHeader+8 || binary.BigEndian.Uint16(udp[2:4]) != clientPort {
		return xid, src, 0, false
	}
	copy(xid[:], udp[udpHeader+4:udpHeader+8])
	return xid, netip.AddrFrom4([4]byte(ip[12:16])), int(binary.BigEndian.Uint16(udp[4:6])), true
}

// replyFilter keeps, of the IPv4 frames on the parent, only UDP to port
// 68 (DHCP replies) that is unfragmented or a first fragment (whose UDP
// header says the port): the client skips fragments but tells which
// transaction got a fragmented reply, since it does not reassemble them.
// A busy parent does not wake the client for every packet.
func replyFilter() ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: ethHeader + 9, Size: 1}, // protocol
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 17, SkipTrue: 6},
		bpf.LoadAbsolute{Off: ethHeader + 6, Size: 2}, // flags, fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 4},
		bpf.LoadMemShift{Off: ethHeader}, // X = IPv4 header length
		bpf.LoadIndirect{Off: ethHeader + 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clientPort, SkipFalse: 1},
		bpf.RetConstant{Val: 0x40000},
		bpf.RetConstant{Val: 0},
	})
}
