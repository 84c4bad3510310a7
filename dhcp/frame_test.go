package dhcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"golang.org/x/net/bpf"
)

// fakeConn returns the queued frames, then an error.
type fakeConn struct {
	net.PacketConn
	frames [][]byte
}

func (f *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if len(f.frames) == 0 {
		return 0, nil, net.ErrClosed
	}
	n := copy(b, f.frames[0])
	f.frames = f.frames[1:]
	return n, nil, nil
}

// TestFrameParsedByLibrary checks the framing against the library's
// parser (the one replies go through) and the checksums.
func TestFrameParsedByLibrary(t *testing.T) {
	payload := []byte("a DHCP message of odd length")
	f := frame(testMAC, addrA, serverA, payload)
	if !bytes.Equal(f[0:6], broadcastMAC) || !bytes.Equal(f[6:12], testMAC) || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		t.Fatalf("Ethernet header % x, want broadcast from %s, IPv4", f[:14], testMAC)
	}
	ip := f[ethHeader : ethHeader+ipv4Header]
	if sum(ip, 0) != 0xffff {
		t.Errorf("IPv4 header checksum does not verify")
	}
	udp := f[ethHeader+ipv4Header:]
	if sum(udp, uint32(sum(ip[12:20], 17+uint32(len(udp))))) != 0xffff {
		t.Errorf("UDP checksum does not verify")
	}
	// A runt and a non-IPv4 frame: demux drops them.
	arp := append(append([]byte{}, f[:12]...), 0x08, 0x06, 1, 2, 3)
	for _, b := range [][]byte{f[:10], arp} {
		if _, _, ok := demux(b); ok {
			t.Errorf("demux took % x", b)
		}
	}
	conn := nclient4.NewBroadcastUDPConn(&fakeConn{frames: [][]byte{f[ethHeader:]}}, &net.UDPAddr{Port: serverPort})
	buf := make([]byte, 1500)
	n, from, err := conn.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], payload) {
		t.Fatalf("library read %q, want %q", buf[:n], payload)
	}
	if u := from.(*net.UDPAddr); !u.IP.Equal(addrA.AsSlice()) || u.Port != clientPort {
		t.Fatalf("library read it from %s, want %s:68", u, addrA)
	}
}

func TestReplyFilter(t *testing.T) {
	vm, err := bpf.NewVM(replyFilter())
	if err != nil {
		t.Fatal(err)
	}
	reply := frame(testMAC, serverA, netip.MustParseAddr("255.255.255.255"), []byte("x"))
	binary.BigEndian.PutUint16(reply[34:36], serverPort) // a server's reply: 67 → 68
	binary.BigEndian.PutUint16(reply[36:38], clientPort)
	options := append(append(append([]byte{}, reply[:14]...), 0x46), reply[15:34]...) // IHL 6: 4 bytes of IP options
	options = append(append(options, 0, 0, 0, 0), reply[34:]...)
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		keep bool
	}{
		{"reply to port 68", func(b []byte) []byte { return b }, true},
		{"reply with IP options", func([]byte) []byte { return options }, true},
		{"request to port 67", func(b []byte) []byte { binary.BigEndian.PutUint16(b[36:38], serverPort); return b }, false},
		{"TCP", func(b []byte) []byte { b[23] = 6; return b }, false},
		{"a later fragment", func(b []byte) []byte { b[21] = 1; return b }, false},
		{"a first fragment (More Fragments, offset 0), for its xid", func(b []byte) []byte { b[20] = 0x20; return b }, true},
	} {
		b := tc.edit(append([]byte{}, reply...))
		n, err := vm.Run(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (n > 0) != tc.keep {
			t.Errorf("%s: filter kept %d bytes, want kept %v", tc.name, n, tc.keep)
		}
	}
}

// TestFirstFragment: of a reply too large for a frame, demux drops the
// fragments but hands the first to the transaction of its xid, with its
// source and size.
func TestFirstFragment(t *testing.T) {
	payload := make([]byte, 2000)
	copy(payload[4:8], []byte{9, 8, 7, 6}) // the xid
	f := udpFrame(testMAC, serverA, netip.MustParseAddr("255.255.255.255"), serverPort, clientPort, payload)
	frs := fragments(f, 1500)
	if len(frs) != 2 {
		t.Fatalf("%d fragments, want 2", len(frs))
	}
	xid, in, ok := demux(frs[0])
	want := fmt.Sprintf("(%d bytes from %s)", udpHeader+len(payload), serverA)
	if !ok || xid != [4]byte{9, 8, 7, 6} || in.m != nil || !strings.HasPrefix(in.frag, want) {
		t.Fatalf("first fragment: xid %x, %+v (%v), want %s", xid, in, ok, want)
	}
	if _, _, ok := demux(frs[1]); ok {
		t.Fatal("the second fragment was taken")
	}
	if _, in, ok := demux(f); ok && in.frag != "" {
		t.Fatal("an unfragmented packet was taken for a first fragment")
	}
}
