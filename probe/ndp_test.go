package probe

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

var testAddr6 = netip.MustParseAddr("2001:db8::c612:5")

func TestSolicitedNode(t *testing.T) {
	g := solicitedNode(netip.MustParseAddr("2001:db8::1:2:3:4567"))
	if g != netip.MustParseAddr("ff02::1:ff03:4567") {
		t.Errorf("solicited-node group %s, want ff02::1:ff03:4567", g)
	}
	if m := multicastMAC(g); m.String() != "33:33:ff:03:45:67" {
		t.Errorf("its Ethernet group %s, want 33:33:ff:03:45:67", m)
	}
	if m := multicastMAC(allNodes); m.String() != "33:33:00:00:00:01" {
		t.Errorf("all nodes' Ethernet group %s, want 33:33:00:00:00:01", m)
	}
}

// wantChecksum checks an NDP frame's checksum against x/net/icmp's.
func wantChecksum(t *testing.T, b []byte) {
	t.Helper()
	src := netip.AddrFrom16([16]byte(b[ipv6SrcOff : ipv6SrcOff+16]))
	dst := netip.AddrFrom16([16]byte(b[ipv6DstOff : ipv6DstOff+16]))
	m := b[icmpOff:]
	msg := icmp.Message{Type: ipv6.ICMPType(m[0]), Code: int(m[1]), Body: &icmp.RawBody{Data: m[4:]}}
	ref, err := msg.Marshal(icmp.IPv6PseudoHeader(src.AsSlice(), dst.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := binary.BigEndian.Uint16(m[2:4]), binary.BigEndian.Uint16(ref[2:4]); got != want {
		t.Errorf("ICMPv6 checksum %#04x, want %#04x", got, want)
	}
}

func TestNAFrame(t *testing.T) {
	b := naFrame(testMAC, testAddr6)
	want := "333300000001" + "0242c6120005" + "86dd" + // Ethernet to all nodes, from mac
		"60000000" + "0020" + "3a" + "ff" + // IPv6, 32 bytes of ICMPv6, hop limit 255
		"20010db80000000000000000c6120005" + "ff020000000000000000000000000001"
	if got := hex.EncodeToString(b[:icmpOff]); got != want {
		t.Errorf("headers:\n got %s\nwant %s", got, want)
	}
	body := hex.EncodeToString(b[icmpOff+4:])
	wantBody := "20000000" + "20010db80000000000000000c6120005" + "0201" + "0242c6120005"
	if body != wantBody {
		t.Errorf("NA after the checksum:\n got %s\nwant %s", body, wantBody)
	}
	if b[icmpOff] != ndpNA || b[icmpOff+1] != 0 {
		t.Errorf("ICMPv6 type %d code %d, want 136 0", b[icmpOff], b[icmpOff+1])
	}
	wantChecksum(t, b)
	p, ok := parseNDP(b)
	if !ok || p.typ != ndpNA || p.flags != naOverride || p.target != testAddr6 || p.tll.String() != testMAC.String() || p.src != testAddr6 {
		t.Errorf("the NA parses as %+v (ok %v)", p, ok)
	}
}

func TestDADFrame(t *testing.T) {
	b := dadFrame(testMAC, testAddr6)
	want := "3333ff120005" + "0242c6120005" + "86dd" +
		"60000000" + "0018" + "3a" + "ff" +
		"00000000000000000000000000000000" + "ff0200000000000000000001ff120005"
	if got := hex.EncodeToString(b[:icmpOff]); got != want {
		t.Errorf("headers:\n got %s\nwant %s", got, want)
	}
	if got := hex.EncodeToString(b[icmpOff+4:]); got != "00000000"+"20010db80000000000000000c6120005" {
		t.Errorf("NS after the checksum: %s, want no options", got)
	}
	wantChecksum(t, b)
	if p, ok := parseNDP(b); !ok || p.typ != ndpNS || !p.src.IsUnspecified() || p.target != testAddr6 || p.sll != nil {
		t.Errorf("the NS parses as %+v (ok %v)", p, ok)
	}
}

// solicitedNA is an NA for target from mac to the all-nodes group with
// the given flags, with a target link-layer option unless tll is nil.
func solicitedNA(mac, tll net.HardwareAddr, src, target netip.Addr, flags byte) []byte {
	body := make([]byte, ndpBodyLen, ndpBodyLen+llOptionLen)
	body[0], body[4] = ndpNA, flags
	a := target.As16()
	copy(body[8:24], a[:])
	if tll != nil {
		body = append(body, optTargetLL, 1)
		body = append(body, tll...)
	}
	return ndpFrame(mac, src, allNodes, body)
}

func TestNDPConflict(t *testing.T) {
	holder := netip.MustParseAddr("fe80::aa")
	for _, c := range []struct {
		name    string
		frame   []byte
		want    net.HardwareAddr
		probing bool
	}{
		{"NA from the holder", solicitedNA(otherMAC, otherMAC, holder, testAddr6, 0x20), otherMAC, false},
		{"NA without an option", solicitedNA(otherMAC, nil, holder, testAddr6, 0x20), otherMAC, false},
		{"NA naming another MAC than its sender", solicitedNA(testMAC, otherMAC, holder, testAddr6, 0x20), otherMAC, false},
		{"simultaneous DAD", dadFrame(otherMAC, testAddr6), otherMAC, true},
		{"our own DAD", dadFrame(testMAC, testAddr6), nil, false},
		{"our own NA", naFrame(testMAC, testAddr6), nil, false},
		{"NA for another address", solicitedNA(otherMAC, otherMAC, holder, netip.MustParseAddr("2001:db8::6"), 0x20), nil, false},
		{"address resolution NS", ndpFrame(otherMAC, holder, solicitedNode(testAddr6), dadFrame(otherMAC, testAddr6)[icmpOff:]), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ce := ndpConflict(c.frame, testMAC, testAddr6)
			if c.want == nil {
				if ce != nil {
					t.Fatalf("conflict %+v, want none", ce)
				}
				return
			}
			if ce == nil || ce.MAC.String() != c.want.String() || ce.Addr != testAddr6 || ce.Probing != c.probing {
				t.Fatalf("conflict %+v, want %s for %s (probing %v)", ce, c.want, testAddr6, c.probing)
			}
		})
	}
}

func TestNDPParseRefusesInvalid(t *testing.T) {
	good := solicitedNA(otherMAC, otherMAC, netip.MustParseAddr("fe80::aa"), testAddr6, 0x20)
	if _, ok := parseNDP(good); !ok {
		t.Fatal("a valid NA does not parse")
	}
	for _, c := range []struct {
		name   string
		mangle func(b []byte) []byte
	}{
		{"hop limit 64", func(b []byte) []byte { b[ipv6HopOff] = 64; return b }},
		{"bad checksum", func(b []byte) []byte { b[icmpOff+2] ^= 0xff; return b }},
		{"code 1", func(b []byte) []byte { b[icmpOff+1] = 1; return b }},
		{"option of length 0", func(b []byte) []byte { b[icmpOff+ndpBodyLen+1] = 0; return b }},
		{"option longer than the message", func(b []byte) []byte { b[icmpOff+ndpBodyLen+1] = 9; return b }},
		{"payload length beyond the frame", func(b []byte) []byte { b[ethHeader+5] += 8; return b }},
		{"truncated", func(b []byte) []byte { return b[:icmpOff+10] }},
		{"IPv4 ethertype", func(b []byte) []byte { b[12], b[13] = 0x08, 0x00; return b }},
		{"UDP", func(b []byte) []byte { b[ipv6NextOff] = 17; return b }},
		{"echo request", func(b []byte) []byte { b[icmpOff] = 128; return b }},
	} {
		b := c.mangle(append([]byte(nil), good...))
		if c.name != "bad checksum" && c.name != "truncated" && len(b) > icmpOff+4 {
			// Keep the checksum right, so only the mangled field is wrong.
			src := netip.AddrFrom16([16]byte(b[ipv6SrcOff : ipv6SrcOff+16]))
			dst := netip.AddrFrom16([16]byte(b[ipv6DstOff : ipv6DstOff+16]))
			binary.BigEndian.PutUint16(b[icmpOff+2:], 0)
			binary.BigEndian.PutUint16(b[icmpOff+2:], icmpv6Checksum(src, dst, b[icmpOff:]))
		}
		if p, ok := parseNDP(b); ok {
			t.Errorf("%s: parsed as %+v", c.name, p)
		}
	}
}

func TestNDPFilter(t *testing.T) {
	f := ndpFilter(testAddr6)
	holder := netip.MustParseAddr("fe80::aa")
	for _, c := range []struct {
		name  string
		frame []byte
		keep  bool
	}{
		{"NA for the address", solicitedNA(otherMAC, otherMAC, holder, testAddr6, 0x20), true},
		{"DAD NS for the address", dadFrame(otherMAC, testAddr6), true},
		{"NA for another address", solicitedNA(otherMAC, otherMAC, holder, netip.MustParseAddr("2001:db8::c612:6"), 0x20), false},
		{"NS for another address", dadFrame(otherMAC, netip.MustParseAddr("2002:db8::c612:5")), false},
		{"ARP", arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0"), false},
		{"short", []byte{0x33, 0x33}, false},
	} {
		if got := runFilter(t, f, c.frame); got != c.keep {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.keep)
		}
	}
	echo := solicitedNA(otherMAC, otherMAC, holder, testAddr6, 0x20)
	echo[icmpOff] = 128
	if runFilter(t, f, echo) {
		t.Error("an echo request was kept")
	}
}
