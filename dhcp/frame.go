package dhcp

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
)

// Framing is package rawlink's: requests are framed there because a
// macvlan endpoint's frames must come from the endpoint's MAC (chaddr),
// or a switch with DHCP snooping's MAC check drops them (the library's
// framing takes the parent's MAC); replies are read out of their frames
// there too, and only the DHCP message is the library's to decode.
const (
	clientPort = 68
	serverPort = 67
)

var broadcastIP = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// frame wraps a DHCP message in UDP (68 → 67), IPv4 (src → dst, TTL 64)
// and Ethernet (srcMAC → broadcast).
func frame(srcMAC []byte, src, dst netip.Addr, payload []byte) []byte {
	return rawlink.UDP4(srcMAC, rawlink.BroadcastMAC, src, dst, clientPort, serverPort, payload)
}

// reply is what a transaction receives: a DHCP reply and the Ethernet
// source of its frame (from), or (frag set) the note that a reply for
// its xid came IP-fragmented.
type reply struct {
	m    *dhcpv4.DHCPv4
	from net.HardwareAddr
	frag string
}

// demux reads a frame on a port: a BOOTREPLY to port 68 for its xid, or
// the first fragment of one, which gets no reply (fragments are not
// reassembled) but can say why. Anything else is dropped.
func demux(f []byte) (dhcpv4.TransactionID, reply, bool) {
	d, ok := rawlink.ParseUDP(f, clientPort)
	if !ok || !d.Src.Is4() {
		return dhcpv4.TransactionID{}, reply{}, false
	}
	if d.FirstFragment {
		if len(d.Data) < 8 {
			return dhcpv4.TransactionID{}, reply{}, false
		}
		return dhcpv4.TransactionID(d.Data[4:8]), reply{frag: fragmented(d)}, true
	}
	m := parse(d.Data)
	if m == nil || m.OpCode != dhcpv4.OpcodeBootReply {
		return dhcpv4.TransactionID{}, reply{}, false
	}
	return m.TransactionID, reply{m: m, from: bytes.Clone(d.SrcMAC)}, true
}

// fragmented describes the first fragment of a reply.
func fragmented(d rawlink.Datagram) string {
	return fmt.Sprintf("(%d bytes from %s), and fragments are not reassembled: make the server's replies fit one frame (they may be at most %d bytes, option 57), e.g. with fewer option 121 routes", d.Length, d.Src, maxMessageSize)
}

// parse decodes a DHCP message, or returns nil for anything malformed,
// even one that made the parser panic.
func parse(b []byte) *dhcpv4.DHCPv4 {
	m, ok := rawlink.Decode(b, dhcpv4.FromBytes)
	if !ok {
		return nil
	}
	return m
}

// replyFilter keeps, of the IPv4 frames on the parent, only UDP to port
// 68 (DHCP replies) that is unfragmented or a first fragment (whose UDP
// header says the port): the client skips fragments but tells which
// transaction got a fragmented reply, since it does not reassemble them.
// A busy parent does not wake the client for every packet.
func replyFilter() []bpf.Instruction {
	const eth = rawlink.EthHeader
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: eth + 9, Size: 1}, // protocol
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.ProtoUDP, SkipTrue: 6},
		bpf.LoadAbsolute{Off: eth + 6, Size: 2}, // flags, fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 4},
		bpf.LoadMemShift{Off: eth}, // X = IPv4 header length
		bpf.LoadIndirect{Off: eth + 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clientPort, SkipFalse: 1},
		bpf.RetConstant{Val: 0x40000},
		bpf.RetConstant{Val: 0},
	}
}
