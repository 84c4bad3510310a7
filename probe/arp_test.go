package probe

import (
	"encoding/hex"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
)

var (
	testMAC   = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0x00, 0x05}
	otherMAC  = net.HardwareAddr{0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc}
	testAddr4 = netip.MustParseAddr("198.18.0.5")
)

func TestARPProbeFrame(t *testing.T) {
	got := hex.EncodeToString(arpFrame(testMAC, netip.IPv4Unspecified(), testAddr4))
	want := "ffffffffffff" + "0242c6120005" + "0806" + // Ethernet: broadcast, from mac, ARP
		"0001" + "0800" + "06" + "04" + "0001" + // Ethernet/IPv4, request
		"0242c6120005" + "00000000" + // sender mac, 0.0.0.0
		"000000000000" + "c6120005" // target hardware zero, 198.18.0.5
	if got != want {
		t.Errorf("ARP probe:\n got %s\nwant %s", got, want)
	}
}

func TestARPAnnouncementFrame(t *testing.T) {
	b := arpFrame(testMAC, testAddr4, testAddr4)
	p, ok := parseARP(b)
	if !ok {
		t.Fatal("the announcement does not parse")
	}
	if p.op != arpRequest || p.sha.String() != testMAC.String() || p.spa != testAddr4 || p.tpa != testAddr4 {
		t.Errorf("announcement: op %d sender %s %s target %s, want request from %s %s for %s", p.op, p.sha, p.spa, p.tpa, testMAC, testAddr4, testAddr4)
	}
	if hex.EncodeToString(b[6:12]) != "0242c6120005" || hex.EncodeToString(b[0:6]) != "ffffffffffff" {
		t.Errorf("Ethernet header % x, want from %s to broadcast", b[0:12], testMAC)
	}
}

// arpPkt builds an ARP frame with the given operation and addresses.
func arpPkt(op uint16, sha net.HardwareAddr, spa, tpa string) []byte {
	b := arpFrame(sha, netip.MustParseAddr(spa), netip.MustParseAddr(tpa))
	b[ethHeader+7] = byte(op)
	return b
}

func TestARPConflict(t *testing.T) {
	for _, c := range []struct {
		name    string
		frame   []byte
		want    net.HardwareAddr
		probing bool
	}{
		{"reply from the holder", arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0"), otherMAC, false},
		{"request from the holder", arpPkt(arpRequest, otherMAC, "198.18.0.5", "198.18.0.1"), otherMAC, false},
		{"announcement by the holder", arpPkt(arpRequest, otherMAC, "198.18.0.5", "198.18.0.5"), otherMAC, false},
		{"simultaneous probe", arpPkt(arpRequest, otherMAC, "0.0.0.0", "198.18.0.5"), otherMAC, true},
		{"our own probe", arpPkt(arpRequest, testMAC, "0.0.0.0", "198.18.0.5"), nil, false},
		{"our own announcement", arpPkt(arpRequest, testMAC, "198.18.0.5", "198.18.0.5"), nil, false},
		{"someone asking for the address", arpPkt(arpRequest, otherMAC, "198.18.0.9", "198.18.0.5"), nil, false},
		{"a reply for another address", arpPkt(arpReply, otherMAC, "198.18.0.6", "198.18.0.9"), nil, false},
		{"a probe for another address", arpPkt(arpRequest, otherMAC, "0.0.0.0", "198.18.0.6"), nil, false},
		{"a reply to a probe (op 2, sender 0)", arpPkt(arpReply, otherMAC, "0.0.0.0", "198.18.0.5"), nil, false},
		{"truncated", arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")[:40], nil, false},
		{"empty", nil, nil, false},
		{"not ARP", append(arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")[:12], 0x08, 0x00, 0x45), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ce := arpConflict(c.frame, testMAC, testAddr4)
			if c.want == nil {
				if ce != nil {
					t.Fatalf("conflict %+v, want none", ce)
				}
				return
			}
			if ce == nil || ce.MAC.String() != c.want.String() || ce.Addr != testAddr4 || ce.Probing != c.probing {
				t.Fatalf("conflict %+v, want %s for %s (probing %v)", ce, c.want, testAddr4, c.probing)
			}
		})
	}
}

func TestARPParseRefusesOtherHardware(t *testing.T) {
	b := arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")
	b[ethHeader+1] = 6 // IEEE 802 instead of Ethernet
	if _, ok := parseARP(b); ok {
		t.Error("an ARP packet of hardware type 6 parsed")
	}
	b = arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")
	b[ethHeader+5] = 16
	if _, ok := parseARP(b); ok {
		t.Error("an ARP packet with 16-byte protocol addresses parsed")
	}
}

// runFilter runs a filter (without the kernel-only VLAN guard) on frame
// in x/net/bpf's VM and reports whether it kept it.
func runFilter(t *testing.T, filter []bpf.Instruction, frame []byte) bool {
	t.Helper()
	if _, err := bpf.Assemble(untagged(filter)); err != nil {
		t.Fatalf("the filter with its VLAN guard does not assemble: %v", err)
	}
	vm, err := bpf.NewVM(filter)
	if err != nil {
		t.Fatalf("filter: %v", err)
	}
	n, err := vm.Run(frame)
	if err != nil {
		t.Fatalf("run the filter: %v", err)
	}
	return n > 0
}

func TestARPFilter(t *testing.T) {
	f := arpFilter(testAddr4)
	for _, c := range []struct {
		name  string
		frame []byte
		keep  bool
	}{
		{"reply from the holder", arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0"), true},
		{"simultaneous probe", arpPkt(arpRequest, otherMAC, "0.0.0.0", "198.18.0.5"), true},
		{"announcement", arpPkt(arpRequest, otherMAC, "198.18.0.5", "198.18.0.5"), true},
		{"request for the address from another", arpPkt(arpRequest, otherMAC, "198.18.0.9", "198.18.0.5"), false},
		{"probe for another address", arpPkt(arpRequest, otherMAC, "0.0.0.0", "198.18.0.6"), false},
		{"other traffic", arpPkt(arpRequest, otherMAC, "198.18.0.1", "198.18.0.2"), false},
		{"IPv4", append(append(arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")[:12], 0x08, 0x00), make([]byte, 40)...), false},
		{"short", []byte{1, 2, 3}, false},
	} {
		if got := runFilter(t, f, c.frame); got != c.keep {
			t.Errorf("%s: kept %v, want %v", c.name, got, c.keep)
		}
	}
}

func TestDropAllAssembles(t *testing.T) {
	if _, err := bpf.Assemble(dropAll()); err != nil {
		t.Fatal(err)
	}
	if runFilter(t, dropAll(), arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")) {
		t.Error("the send-only filter kept a frame")
	}
}
