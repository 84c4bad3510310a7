package itest

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Frame is a frame a Capture saw, and when.
type Frame struct {
	At time.Time
	B  []byte
}

// Capture records every frame of one link (AF_PACKET) until the test ends:
// what the LAN sees.
type Capture struct {
	conn *packet.Conn
	done chan struct{}

	mu     sync.Mutex
	frames []Frame
}

// AttachNetns returns a Netns for an existing namespace (a named one,
// /run/netns/NAME), which the test does not own: cleanup closes the handle
// and leaves the namespace.
func AttachNetns(t testing.TB, path string) *Netns {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open namespace %s: %v", path, err)
	}
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		t.Fatalf("netlink handle into %s: %v", path, err)
	}
	t.Cleanup(func() { nl.Close(); h.Close() })
	return &Netns{t: t, handle: h, NL: nl}
}

// StartCapture records the frames of link in namespace ns.
func StartCapture(t testing.TB, ns *Netns, link string) *Capture {
	t.Helper()
	c := &Capture{done: make(chan struct{})}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		c.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capture on %s: %v", link, err)
	}
	go func() {
		defer close(c.done)
		buf := make([]byte, 9216)
		for {
			n, _, err := c.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			c.mu.Lock()
			c.frames = append(c.frames, Frame{time.Now(), append([]byte(nil), buf[:n]...)})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.conn.Close(); <-c.done })
	return c
}

// Match returns the frames seen so far that keep says to keep.
func (c *Capture) Match(keep func([]byte) bool) []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Frame
	for _, f := range c.frames {
		if keep(f.B) {
			out = append(out, f)
		}
	}
	return out
}

// WantMatches waits up to wait for n frames keep keeps, then 300 ms more
// for any extra one, and returns them; it fails unless there are exactly n.
func (c *Capture) WantMatches(t testing.TB, what string, n int, wait time.Duration, keep func([]byte) bool) []Frame {
	t.Helper()
	WaitFor(wait, func() bool { return len(c.Match(keep)) >= n })
	time.Sleep(300 * time.Millisecond)
	got := c.Match(keep)
	if len(got) != n {
		t.Fatalf("the LAN saw %d %s, want %d", len(got), what, n)
	}
	return got
}

// ARP are the ARP fields of an Ethernet frame, read independently of
// package probe.
type ARP struct {
	EthDst, EthSrc, SHA, THA net.HardwareAddr
	Op                       uint16
	SPA, TPA                 netip.Addr
}

// ReadARP reads an Ethernet/IPv4 ARP frame (ok false for anything else).
func ReadARP(b []byte) (ARP, bool) {
	if len(b) < 42 || binary.BigEndian.Uint16(b[12:14]) != 0x0806 || b[18] != 6 || b[19] != 4 {
		return ARP{}, false
	}
	return ARP{EthDst: b[0:6], EthSrc: b[6:12], Op: binary.BigEndian.Uint16(b[20:22]),
		SHA: b[22:28], SPA: netip.AddrFrom4([4]byte(b[28:32])), THA: b[32:38], TPA: netip.AddrFrom4([4]byte(b[38:42]))}, true
}

// NDP are the fields of an Ethernet/IPv6/ICMPv6 Neighbour Solicitation or
// Advertisement with at most one link-layer address option.
type NDP struct {
	EthDst, EthSrc net.HardwareAddr
	HopLimit       byte
	Src, Dst       netip.Addr
	Type, Flags    byte
	Target         netip.Addr
	OptType        byte
	OptMAC         net.HardwareAddr
}

// ReadNDP reads an NS or NA frame (ok false for anything else).
func ReadNDP(b []byte) (NDP, bool) {
	if len(b) < 78 || binary.BigEndian.Uint16(b[12:14]) != 0x86dd || b[20] != 58 || (b[54] != 135 && b[54] != 136) {
		return NDP{}, false
	}
	f := NDP{EthDst: b[0:6], EthSrc: b[6:12], HopLimit: b[21],
		Src: netip.AddrFrom16([16]byte(b[22:38])), Dst: netip.AddrFrom16([16]byte(b[38:54])),
		Type: b[54], Flags: b[58], Target: netip.AddrFrom16([16]byte(b[62:78]))}
	if len(b) >= 86 && b[79] == 1 {
		f.OptType, f.OptMAC = b[78], b[80:86]
	}
	return f, true
}
