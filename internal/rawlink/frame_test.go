package rawlink

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

var (
	macA = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xb4, 0x01}
	macB = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xb4, 0x02}
)

// TestSumKnown: the IPv4 header of RFC 1071's usual example (Wikipedia's
// "IPv4 header checksum") sums to b861.
func TestSumKnown(t *testing.T) {
	h, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	if c := ^Sum(h, 0); c != 0xb861 {
		t.Fatalf("checksum %04x, want b861", c)
	}
	binary.BigEndian.PutUint16(h[10:12], 0xb861)
	if Sum(h, 0) != 0xffff {
		t.Fatal("a header with its checksum does not verify")
	}
	if Sum([]byte{0xab}, 0) != 0xab00 {
		t.Fatal("an odd byte is not padded with zero")
	}
}

// TestUDP4Known checks a frame against checksums computed apart (Python,
// RFC 768's pseudo header) and reads it back.
func TestUDP4Known(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("255.255.255.255")
	f := UDP4(macA, BroadcastMAC, src, dst, 68, 67, []byte("hello"))
	want := "ffffffffffff" + "0242c612b401" + "0800" +
		"4500" + "0021" + "0000" + "0000" + "4011" + "b8cb" + "c0000201" + "ffffffff" +
		"0044" + "0043" + "000d" + "f979" + hex.EncodeToString([]byte("hello"))
	if got := hex.EncodeToString(f); got != want {
		t.Fatalf("frame\n%s, want\n%s", got, want)
	}
	d, ok := ParseUDP(f, 67)
	if !ok || d.Src != src || d.Dst != dst || d.SrcPort != 68 || d.Length != 13 || string(d.Data) != "hello" ||
		!bytes.Equal(d.SrcMAC, macA) || !bytes.Equal(d.DstMAC, BroadcastMAC) || d.FirstFragment || d.HopLimit != 64 {
		t.Fatalf("ParseUDP = %+v, %v", d, ok)
	}
	if _, ok := ParseUDP(f, 68); ok {
		t.Fatal("ParseUDP took a datagram to another port")
	}
	// Padding after the IP packet (a short frame padded to 60 bytes) is cut off.
	if d, ok := ParseUDP(append(f, 0, 0, 0), 67); !ok || string(d.Data) != "hello" {
		t.Fatalf("padded: %q, %v", d.Data, ok)
	}
}

// TestUDP6Known checks a frame against a checksum computed apart and
// reads it back.
func TestUDP6Known(t *testing.T) {
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::1:2")
	f := UDP6(macA, MulticastMAC(dst), src, dst, 546, 547, []byte{1, 2, 3, 4, 5})
	if !bytes.Equal(f[0:6], net.HardwareAddr{0x33, 0x33, 0, 1, 0, 2}) || binary.BigEndian.Uint16(f[12:14]) != EtherIPv6 {
		t.Fatalf("Ethernet header % x", f[:EthHeader])
	}
	ip := f[EthHeader:]
	if ip[0] != 0x60 || binary.BigEndian.Uint16(ip[4:6]) != 13 || ip[6] != ProtoUDP || ip[7] != 1 {
		t.Fatalf("IPv6 header % x: want payload 13, UDP, hop limit 1 to a group", ip[:IPv6Header])
	}
	if c := binary.BigEndian.Uint16(ip[IPv6Header+6:]); c != 0xf501 {
		t.Fatalf("UDP checksum %04x, want f501", c)
	}
	if Sum(ip[IPv6Header:], PseudoSum(src, dst, ProtoUDP, 13)) != 0xffff {
		t.Fatal("UDP checksum does not verify")
	}
	if u := UDP6(macA, macB, src, netip.MustParseAddr("fe80::2"), 1, 2, nil); u[EthHeader+7] != 64 {
		t.Fatalf("hop limit %d to a unicast address, want 64", u[EthHeader+7])
	}
	d, ok := ParseUDP(f, 547)
	if !ok || d.Src != src || d.Dst != dst || !bytes.Equal(d.Data, []byte{1, 2, 3, 4, 5}) {
		t.Fatalf("ParseUDP = %+v, %v", d, ok)
	}
}

// TestAdvertisementChecksum checks the ICMPv6 framing against
// golang.org/x/net/icmp's checksum.
func TestAdvertisementChecksum(t *testing.T) {
	target, dst := netip.MustParseAddr("fe80::42:c6ff:fe12:b401"), netip.MustParseAddr("fe80::9")
	f := Advertisement(macA, macB, target, dst, NASolicited|NAOverride)
	p, ok := Parse(f)
	if !ok || p.Proto != ProtoICMPv6 || p.HopLimit != 255 || p.Src != target || p.Dst != dst || !bytes.Equal(p.DstMAC, macB) {
		t.Fatalf("Parse = %+v, %v", p, ok)
	}
	m := p.Payload
	if m[0] != NDPAdvertisement || m[4] != 0x60 || netip.AddrFrom16([16]byte(m[8:24])) != target || m[24] != OptTargetLL || !bytes.Equal(m[26:32], macA) {
		t.Fatalf("NA % x", m)
	}
	lib := icmp.Message{Type: ipv6.ICMPTypeNeighborAdvertisement, Body: &icmp.RawBody{Data: m[4:]}}
	b, err := lib.Marshal(icmp.IPv6PseudoHeader(target.AsSlice(), dst.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, m) {
		t.Fatalf("NA\n% x, x/net/icmp's\n% x", m, b)
	}
	if ICMPv6Checksum(target, dst, m) != binary.BigEndian.Uint16(m[2:4]) {
		t.Fatal("ICMPv6Checksum does not verify the field it set")
	}
}

func TestSolicitedNode(t *testing.T) {
	g := SolicitedNode(netip.MustParseAddr("2001:db8::1:2:3:4567"))
	if g != netip.MustParseAddr("ff02::1:ff03:4567") || MulticastMAC(g).String() != "33:33:ff:03:45:67" {
		t.Fatalf("%s, %s", g, MulticastMAC(g))
	}
}

// TestParseRefuses: runts, other EtherTypes, bad lengths and later
// fragments are no packets; a first fragment is one, marked.
func TestParseRefuses(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	f := UDP4(macA, macB, src, dst, 67, 68, make([]byte, 100))
	edit := func(e func(b []byte) []byte) []byte { return e(append([]byte(nil), f...)) }
	for name, b := range map[string][]byte{
		"runt":             f[:10],
		"ARP":              edit(func(b []byte) []byte { b[13] = 0x06; return b }),
		"IPv6 EtherType":   edit(func(b []byte) []byte { b[12], b[13] = 0x86, 0xdd; return b }),
		"version 6 in v4":  edit(func(b []byte) []byte { b[EthHeader] = 0x65; return b }),
		"IHL 4":            edit(func(b []byte) []byte { b[EthHeader] = 0x44; return b }),
		"total too long":   edit(func(b []byte) []byte { b[EthHeader+2] = 0xff; return b }),
		"later fragment":   edit(func(b []byte) []byte { b[EthHeader+7] = 1; return b }),
		"truncated header": f[:EthHeader+IPv4Header-1],
	} {
		if p, ok := Parse(b); ok {
			t.Errorf("%s: Parse took it: %+v", name, p)
		}
	}
	for name, b := range map[string][]byte{
		"UDP length past the packet": edit(func(b []byte) []byte { b[EthHeader+IPv4Header+4] = 0xff; return b }),
		"UDP length below 8":         edit(func(b []byte) []byte { b[EthHeader+IPv4Header+4], b[EthHeader+IPv4Header+5] = 0, 7; return b }),
		"TCP":                        edit(func(b []byte) []byte { b[EthHeader+9] = 6; return b }),
	} {
		if d, ok := ParseUDP(b, 68); ok {
			t.Errorf("%s: ParseUDP took it: %+v", name, d)
		}
	}
	first := edit(func(b []byte) []byte { b[EthHeader+6] = 0x20; return b })
	if d, ok := ParseUDP(first, 68); !ok || !d.FirstFragment || d.Length != UDPHeader+100 {
		t.Errorf("first fragment: %+v, %v", d, ok)
	}
}

func TestSolicitation(t *testing.T) {
	target, src := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::9")
	m := make([]byte, NDPBodyLen)
	m[0] = NDPSolicitation
	copy(m[8:24], target.AsSlice())
	ns := ICMPv6(macB, MulticastMAC(SolicitedNode(target)), src, SolicitedNode(target), 255, m)
	if got, p, ok := Solicitation(ns); !ok || got != target || p.Src != src || !bytes.Equal(p.SrcMAC, macB) {
		t.Fatalf("Solicitation = %s, %+v, %v", got, p, ok)
	}
	ns[EthHeader+7] = 64
	if _, _, ok := Solicitation(ns); ok {
		t.Fatal("a Solicitation with hop limit 64 was taken")
	}
	if _, _, ok := Solicitation(Advertisement(macA, macB, target, src, 0)); ok {
		t.Fatal("an Advertisement was taken for a Solicitation")
	}
}

func TestDecode(t *testing.T) {
	if m, ok := Decode([]byte("x"), func(b []byte) (string, error) { return string(b), nil }); !ok || m != "x" {
		t.Fatalf("Decode = %q, %v", m, ok)
	}
	if _, ok := Decode([]byte("x"), func([]byte) (string, error) { panic("a library bug") }); ok {
		t.Fatal("a panicking decoder was taken")
	}
}
