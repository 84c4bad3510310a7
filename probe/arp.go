package probe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
)

// ARP over Ethernet (RFC 826), as RFC 5227 uses it: probes (sender IP
// 0.0.0.0) and announcements (sender IP = target IP), both requests to
// the broadcast address.

const (
	ethHeader   = rawlink.EthHeader
	arpLen      = 28
	etherARP    = rawlink.EtherARP
	arpRequest  = 1
	arpReply    = 2
	arpSpaOff   = ethHeader + 14 // sender protocol address
	arpTpaOff   = ethHeader + 24 // target protocol address
	arpShaOff   = ethHeader + 8  // sender hardware address
	arpFrameLen = ethHeader + arpLen
)

// arpFrame is an ARP request from mac for target with sender IP sender
// (0.0.0.0 for a probe, target itself for an announcement), target
// hardware address zero (RFC 5227 §2.1.1), Ethernet mac → broadcast.
func arpFrame(mac net.HardwareAddr, sender, target netip.Addr) []byte {
	b := make([]byte, arpFrameLen)
	rawlink.Ethernet(b, rawlink.BroadcastMAC, mac, etherARP)
	a := b[ethHeader:]
	binary.BigEndian.PutUint16(a[0:2], 1)      // hardware type Ethernet
	binary.BigEndian.PutUint16(a[2:4], 0x0800) // protocol type IPv4
	a[4], a[5] = 6, 4                          // address lengths
	binary.BigEndian.PutUint16(a[6:8], arpRequest)
	copy(a[8:14], mac)
	s, t := sender.As4(), target.As4()
	copy(a[14:18], s[:])
	copy(a[24:28], t[:])
	return b
}

// arpPacket is what a conflict check reads of a received ARP frame.
type arpPacket struct {
	op       uint16
	sha      net.HardwareAddr
	spa, tpa netip.Addr
}

// parseARP decodes an Ethernet/IPv4 ARP frame; ok is false for anything
// else or anything too short.
func parseARP(b []byte) (p arpPacket, ok bool) {
	if len(b) < arpFrameLen || binary.BigEndian.Uint16(b[12:14]) != etherARP {
		return p, false
	}
	a := b[ethHeader:]
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return p, false
	}
	p.op = binary.BigEndian.Uint16(a[6:8])
	p.sha = net.HardwareAddr(bytes.Clone(a[8:14]))
	p.spa = netip.AddrFrom4([4]byte(a[14:18]))
	p.tpa = netip.AddrFrom4([4]byte(a[24:28]))
	return p, true
}

// arpConflict reports the conflict a received frame shows for a probe of
// addr from mac (RFC 5227 §2.1.1), or nil: any ARP packet whose sender IP
// is addr from another sender MAC, or an ARP probe (request, sender IP
// 0.0.0.0) for addr from another sender MAC.
func arpConflict(b []byte, mac net.HardwareAddr, addr netip.Addr) *ConflictError {
	p, ok := parseARP(b)
	if !ok || bytes.Equal(p.sha, mac) {
		return nil
	}
	switch {
	case p.spa == addr && p.op == arpReply:
		return &ConflictError{Addr: addr, MAC: p.sha, Seen: "an ARP reply"}
	case p.spa == addr && p.op == arpRequest:
		return &ConflictError{Addr: addr, MAC: p.sha, Seen: "an ARP request"}
	case p.spa == addr:
		return &ConflictError{Addr: addr, MAC: p.sha, Seen: "an ARP packet"}
	case p.op == arpRequest && p.spa.IsUnspecified() && p.tpa == addr:
		return &ConflictError{Addr: addr, MAC: p.sha, Seen: "an ARP probe", Probing: true}
	}
	return nil
}

// arpFilter keeps the frames arpConflict may take for addr: untagged ARP
// with sender IP addr, or with sender IP 0.0.0.0 and target IP addr.
func arpFilter(addr netip.Addr) []bpf.Instruction {
	a := addr.As4()
	ip := binary.BigEndian.Uint32(a[:])
	return link([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherARP, SkipFalse: toDrop},
		bpf.LoadAbsolute{Off: arpSpaOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ip, SkipTrue: toAccept},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: toDrop},
		bpf.LoadAbsolute{Off: arpTpaOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ip, SkipTrue: toAccept, SkipFalse: toDrop},
	})
}

// Branch targets of link.
const (
	toAccept = 0xfe
	toDrop   = 0xff
)

// link ends prog with accept and drop and points the branches marked
// toAccept and toDrop at them.
func link(prog []bpf.Instruction) []bpf.Instruction {
	prog = append(prog, bpf.RetConstant{Val: 0xffff}, bpf.RetConstant{Val: 0})
	accept, drop := len(prog)-2, len(prog)-1
	target := func(i int, skip uint8) uint8 {
		switch skip {
		case toAccept:
			return uint8(accept - i - 1)
		case toDrop:
			return uint8(drop - i - 1)
		}
		return skip
	}
	for i, ins := range prog {
		if j, ok := ins.(bpf.JumpIf); ok {
			j.SkipTrue, j.SkipFalse = target(i, j.SkipTrue), target(i, j.SkipFalse)
			prog[i] = j
		}
	}
	return prog
}

// dropAll is the filter of a socket that only sends.
func dropAll() []bpf.Instruction { return []bpf.Instruction{bpf.RetConstant{Val: 0}} }
