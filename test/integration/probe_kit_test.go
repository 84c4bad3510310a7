package integration

// The test LAN of the address probe's tests (probe_arp_test.go,
// probe_ndp_test.go): a "host" namespace with the parent vp0, one end of
// a veth whose other end lan0 is in a "LAN" namespace, where a capture
// (an ETH_P_ALL packet socket) records every frame lan0 receives and
// sends, and where the kernel plays the LAN's other hosts.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/probe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	probeParent = "vp0"
	probeLANEnd = "lan0"
)

// probeMAC is the endpoint's MAC the tests probe and announce with.
var probeMAC = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0x07, 0x05}

// probeLAN is the test LAN.
type probeLAN struct {
	t      *testing.T
	host   *itest.Netns
	lan    *itest.Netns
	lanMAC net.HardwareAddr // lan0's
	prober *probe.Prober    // opens its sockets in host
}

func newProbeLAN(t *testing.T) *probeLAN {
	t.Helper()
	itest.RequireRoot(t)
	host, lan := itest.NewNetns(t), itest.NewNetns(t)
	host.AddVeth(probeParent, probeLANEnd, 1500)
	l := host.MoveLink(probeLANEnd, lan, probeLANEnd)
	lan.Up(probeLANEnd) // a link moved to a namespace arrives down
	// Until the kernel's link watch has seen the carrier and given vp0
	// its queue, what is sent on it is dropped: wait for that.
	operUp := func(ns *itest.Netns, name string) bool { return ns.MustLink(name).Attrs().OperState == netlink.OperUp }
	if !itest.WaitFor(5*time.Second, func() bool { return operUp(host, probeParent) && operUp(lan, probeLANEnd) }) {
		t.Fatalf("%s or %s is not operationally up 5 s after being set up", probeParent, probeLANEnd)
	}
	return &probeLAN{t: t, host: host, lan: lan, lanMAC: l.Attrs().HardwareAddr,
		prober: probe.New(probe.WithNetns(host.Handle()))}
}

// captured is a frame the capture saw and when.
type captured struct {
	at time.Time
	b  []byte
}

// capture records the frames of a link in a namespace.
type capture struct {
	conn *packet.Conn
	done chan struct{}

	mu     sync.Mutex
	frames []captured
}

// capture starts recording lan0's frames until the test ends.
func (l *probeLAN) capture() *capture {
	l.t.Helper()
	c := &capture{done: make(chan struct{})}
	err := l.lan.Do(func() error {
		ifi, err := net.InterfaceByName(probeLANEnd)
		if err != nil {
			return err
		}
		c.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		l.t.Fatalf("capture on %s in the LAN's namespace: %v", probeLANEnd, err)
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
			c.frames = append(c.frames, captured{time.Now(), append([]byte(nil), buf[:n]...)})
			c.mu.Unlock()
		}
	}()
	l.t.Cleanup(func() { c.conn.Close(); <-c.done })
	return c
}

// match returns the frames seen so far that keep says to keep.
func (c *capture) match(keep func([]byte) bool) []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []captured
	for _, f := range c.frames {
		if keep(f.b) {
			out = append(out, f)
		}
	}
	return out
}

// wantMatches waits up to 3 s for n frames keep keeps, then 300 ms more
// for any extra one, and returns them; it fails unless there are exactly n.
func (c *capture) wantMatches(t *testing.T, what string, n int, keep func([]byte) bool) []captured {
	t.Helper()
	itest.WaitFor(3*time.Second, func() bool { return len(c.match(keep)) >= n })
	time.Sleep(300 * time.Millisecond)
	got := c.match(keep)
	if len(got) != n {
		t.Fatalf("the LAN saw %d %s, want %d", len(got), what, n)
	}
	return got
}

// wantSpacing fails unless consecutive frames are between lo and hi apart.
func wantSpacing(t *testing.T, what string, fs []captured, lo, hi time.Duration) {
	t.Helper()
	for i := 1; i < len(fs); i++ {
		if d := fs[i].at.Sub(fs[i-1].at); d < lo || d > hi {
			t.Errorf("%s %d came %s after the one before, want %s to %s", what, i+1, d, lo, hi)
		}
	}
}

// arpFields are the ARP fields of an Ethernet frame (ok false if not
// Ethernet/IPv4 ARP), read here independently of package probe.
type arpFields struct {
	ethDst, ethSrc, sha, tha net.HardwareAddr
	op                       uint16
	spa, tpa                 netip.Addr
}

func readARP(b []byte) (arpFields, bool) {
	if len(b) < 42 || binary.BigEndian.Uint16(b[12:14]) != 0x0806 || b[18] != 6 || b[19] != 4 {
		return arpFields{}, false
	}
	return arpFields{ethDst: b[0:6], ethSrc: b[6:12], op: binary.BigEndian.Uint16(b[20:22]),
		sha: b[22:28], spa: netip.AddrFrom4([4]byte(b[28:32])), tha: b[32:38], tpa: netip.AddrFrom4([4]byte(b[38:42]))}, true
}

// ndpFields are the fields of an Ethernet/IPv6/ICMPv6 NS or NA with at
// most one link-layer address option (ok false otherwise).
type ndpFields struct {
	ethDst, ethSrc net.HardwareAddr
	hopLimit       byte
	src, dst       netip.Addr
	typ, flags     byte
	target         netip.Addr
	optType        byte
	optMAC         net.HardwareAddr
}

func readNDP(b []byte) (ndpFields, bool) {
	if len(b) < 78 || binary.BigEndian.Uint16(b[12:14]) != 0x86dd || b[20] != 58 || (b[54] != 135 && b[54] != 136) {
		return ndpFields{}, false
	}
	f := ndpFields{ethDst: b[0:6], ethSrc: b[6:12], hopLimit: b[21],
		src: netip.AddrFrom16([16]byte(b[22:38])), dst: netip.AddrFrom16([16]byte(b[38:54])),
		typ: b[54], flags: b[58], target: netip.AddrFrom16([16]byte(b[62:78]))}
	if len(b) >= 86 && b[79] == 1 {
		f.optType, f.optMAC = b[78], b[80:86]
	}
	return f, true
}

// wantConflict fails unless err is a *probe.ConflictError for addr naming mac.
func wantConflict(t *testing.T, err error, addr netip.Addr, mac net.HardwareAddr) *probe.ConflictError {
	t.Helper()
	var ce *probe.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, probe.ErrConflict) {
		t.Fatalf("probe of %s: %v, want a *probe.ConflictError wrapping ErrConflict", addr, err)
	}
	if ce.Addr != addr || !bytes.Equal(ce.MAC, mac) || ce.Parent != probeParent {
		t.Fatalf("conflict %+v, want %s held by %s on %s", ce, addr, mac, probeParent)
	}
	for _, s := range []string{addr.String(), mac.String()} {
		if !bytes.Contains([]byte(err.Error()), []byte(s)) {
			t.Errorf("%q does not name %s", err, s)
		}
	}
	return ce
}

// inUnicastFilter reports whether mac is in the host's unicast address
// list of link (the bridge fdb dump of a non-bridge link lists it).
func inUnicastFilter(t *testing.T, ns *itest.Netns, link string, mac net.HardwareAddr) bool {
	t.Helper()
	neighs, err := ns.NL.NeighList(ns.MustLink(link).Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatalf("list the address filter of %s: %v", link, err)
	}
	for _, n := range neighs {
		if bytes.Equal(n.HardwareAddr, mac) {
			return true
		}
	}
	return false
}

// addNeigh adds a STALE neighbour entry addr -> mac on link, as if the
// LAN host had talked to addr when another MAC held it.
func addNeigh(t *testing.T, ns *itest.Netns, link string, addr netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	family := unix.AF_INET
	if addr.Is6() {
		family = unix.AF_INET6
	}
	n := &netlink.Neigh{LinkIndex: ns.MustLink(link).Attrs().Index, Family: family, State: netlink.NUD_STALE,
		IP: addr.AsSlice(), HardwareAddr: mac}
	if err := ns.NL.NeighAdd(n); err != nil {
		t.Fatalf("neighbour %s -> %s on %s: %v", addr, mac, link, err)
	}
}

// neighMAC returns the MAC of the neighbour entry for addr on link, or nil.
func neighMAC(t *testing.T, ns *itest.Netns, link string, addr netip.Addr) net.HardwareAddr {
	t.Helper()
	family := unix.AF_INET
	if addr.Is6() {
		family = unix.AF_INET6
	}
	neighs, err := ns.NL.NeighList(ns.MustLink(link).Attrs().Index, family)
	if err != nil {
		t.Fatalf("list the neighbours on %s: %v", link, err)
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr {
			return n.HardwareAddr
		}
	}
	return nil
}
