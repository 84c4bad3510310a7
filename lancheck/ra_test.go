package lancheck

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/rawlink"
	"github.com/vishvananda/netns"
)

// raConn is a fake packet socket: it records the frames written and
// reads the frames the test injects.
type raConn struct {
	mu     sync.Mutex
	sent   [][]byte
	at     []time.Time
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func newRAConn() *raConn { return &raConn{in: make(chan []byte, 64), closed: make(chan struct{})} }

func (c *raConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-c.in:
		return copy(b, f), &packet.Addr{HardwareAddr: net.HardwareAddr(f[6:12])}, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	}
}

func (c *raConn) WriteTo(b []byte, a net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	if pa, ok := a.(*packet.Addr); !ok || pa.HardwareAddr.String() != "33:33:00:00:00:02" {
		return 0, fmt.Errorf("written to %v, want 33:33:00:00:00:02", a)
	}
	c.mu.Lock()
	c.sent = append(c.sent, append([]byte(nil), b...))
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	return len(b), nil
}

func (c *raConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *raConn) frames() ([][]byte, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.sent...), append([]time.Time(nil), c.at...)
}

func (c *raConn) LocalAddr() net.Addr              { return &packet.Addr{} }
func (c *raConn) SetDeadline(time.Time) error      { return nil }
func (c *raConn) SetReadDeadline(time.Time) error  { return nil }
func (c *raConn) SetWriteDeadline(time.Time) error { return nil }

// raSpec is a Router Advertisement to build in a test.
type raSpec struct {
	mac             net.HardwareAddr
	src             netip.Addr
	hop             byte
	flags           byte
	lifetime        uint16
	prefixes        []raPIO
	mtu             uint32
	badSum, zeroOpt bool
	typ             byte // 0: an RA
	dst             netip.Addr
}

type raPIO struct {
	prefix           string
	flags            byte
	valid, preferred uint32
}

func (a raSpec) frame() []byte {
	m := make([]byte, raHeader)
	m[0] = ndpRA
	if a.typ != 0 {
		m[0] = a.typ
	}
	m[4], m[5] = 64, a.flags
	binary.BigEndian.PutUint16(m[6:8], a.lifetime)
	for _, p := range a.prefixes {
		pfx := netip.MustParsePrefix(p.prefix)
		o := make([]byte, raPIOLen)
		o[0], o[1], o[2], o[3] = raOptPrefix, 4, byte(pfx.Bits()), p.flags
		binary.BigEndian.PutUint32(o[4:8], p.valid)
		binary.BigEndian.PutUint32(o[8:12], p.preferred)
		b := pfx.Addr().As16()
		copy(o[16:], b[:])
		m = append(m, o...)
	}
	// A source link-layer address option (type 1) and one of a type
	// the client does not know (25, RDNSS) are skipped.
	sll := append([]byte{rawlink.OptSourceLL, 1}, a.mac...)
	m = append(m, sll...)
	m = append(m, 25, 3, 0, 0, 0, 0, 0, 60)
	m = append(m, netip.MustParseAddr("2001:db8:70::53").AsSlice()...)
	if a.mtu != 0 {
		o := make([]byte, raMTULen)
		o[0], o[1] = raOptMTU, 1
		binary.BigEndian.PutUint32(o[4:8], a.mtu)
		m = append(m, o...)
	}
	if a.zeroOpt {
		m = append(m, 99, 0, 0, 0, 0, 0, 0, 0)
	}
	hop := a.hop
	if hop == 0 {
		hop = 255
	}
	dst := a.dst
	if !dst.IsValid() {
		dst = raAllNodes
	}
	dstMAC := raTestMAC
	if dst.IsMulticast() {
		dstMAC = rawlink.MulticastMAC(dst)
	}
	f := rawlink.ICMPv6(a.mac, dstMAC, a.src, dst, hop, m)
	if a.badSum {
		f[raICMPOff+2]++
	}
	return f
}

func (r Router) String() string {
	return fmt.Sprintf("%s %s M=%v O=%v %s %v mtu %d", r.Source, r.MAC, r.Managed, r.Other, r.Lifetime, r.Prefixes, r.MTU)
}

var (
	raRouterA = net.HardwareAddr{0x02, 0, 0, 0, 0x0a, 0x01}
	raRouterB = net.HardwareAddr{0x02, 0, 0, 0, 0x0b, 0x01}
	raTestMAC = net.HardwareAddr{0x02, 0x42, 0x11, 0x22, 0x33, 0x44}
)

// The Router Solicitation as sent, byte by byte: from the MAC and ::,
// to ff02::2 at 33:33:00:00:00:02, hop limit 255, type 133, no options;
// at once, then every interval, three in all however long the context.
func TestRoutersSolicitation(t *testing.T) {
	c := newRAConn()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := solicitRouters(ctx, rawlink.Over("lan0", c), raTestMAC, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sent, at := c.frames()
	if len(sent) != maxSolicitations {
		t.Fatalf("%d solicitations sent in 600ms every 100ms, want %d (at most)", len(sent), maxSolicitations)
	}
	if d := at[0].Sub(start); d > 50*time.Millisecond {
		t.Errorf("the first solicitation went %s after the start, want at once", d)
	}
	if d := at[1].Sub(at[0]); d < 90*time.Millisecond {
		t.Errorf("the second solicitation went %s after the first, want the interval (100ms)", d)
	}
	want := []byte{
		0x33, 0x33, 0, 0, 0, 2, 0x02, 0x42, 0x11, 0x22, 0x33, 0x44, 0x86, 0xdd, // Ethernet
		0x60, 0, 0, 0, 0, 8, 58, 255, // IPv6: payload 8 bytes, ICMPv6, hop limit 255
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // from ::
		0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // to ff02::2
		133, 0, 0, 0, 0, 0, 0, 0, // RS, checksum (below), reserved, no options
	}
	for i, f := range sent {
		if len(f) != len(want) {
			t.Fatalf("solicitation %d is %d bytes, want %d (no source link-layer option): % x", i+1, len(f), len(want), f)
		}
		got := append([]byte(nil), f...)
		sum := binary.BigEndian.Uint16(got[raICMPOff+2:])
		got[raICMPOff+2], got[raICMPOff+3] = 0, 0
		if string(got) != string(want) {
			t.Fatalf("solicitation %d:\n% x\nwant\n% x", i+1, f, want)
		}
		if c := rawlink.ICMPv6Checksum(netip.IPv6Unspecified(), rsAllRouters, f[raICMPOff:]); c != sum {
			t.Errorf("solicitation %d checksum %04x, want %04x", i+1, sum, c)
		}
	}
}

// Every valid advertisement is collected until the context ends (one
// comes after 300 ms), each router once as its latest one says; invalid
// ones (hop limit, source, checksum, a zero-length option, not an RA)
// are dropped.
func TestRoutersCollect(t *testing.T) {
	c := newRAConn()
	llA, llB := netip.MustParseAddr("fe80::a:1"), netip.MustParseAddr("fe80::b:1")
	a := raSpec{mac: raRouterA, src: llA, flags: raManaged | raOther, lifetime: 1800, mtu: 1480,
		prefixes: []raPIO{{"2001:db8:70::/64", pioOnLink | pioAuto, 86400, 14400}, {"2001:db8:71::/48", pioOnLink, 0xffffffff, 0xffffffff}}}
	b1 := raSpec{mac: raRouterB, src: llB, lifetime: 0}
	b2 := raSpec{mac: raRouterB, src: llB, lifetime: 600, flags: raOther, prefixes: []raPIO{{"2001:db8:72::/64", pioAuto, 3600, 1800}}, dst: netip.MustParseAddr("fe80::42:11ff:fe22:3344")}
	for _, f := range []raSpec{
		a, b1,
		{mac: raRouterA, src: netip.MustParseAddr("fe80::c:1"), hop: 64, lifetime: 1},                      // hop limit
		{mac: raRouterA, src: netip.MustParseAddr("2001:db8:70::1"), lifetime: 1},                          // not link-local
		{mac: raRouterA, src: netip.MustParseAddr("fe80::d:1"), lifetime: 1, badSum: true},                 // checksum
		{mac: raRouterA, src: netip.MustParseAddr("fe80::e:1"), lifetime: 1, zeroOpt: true},                // option of length 0
		{mac: raRouterA, src: netip.MustParseAddr("fe80::f:1"), lifetime: 1, typ: rawlink.NDPSolicitation}, // not an RA
	} {
		c.in <- f.frame()
	}
	time.AfterFunc(300*time.Millisecond, func() { c.in <- b2.frame() })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	routers, err := solicitRouters(ctx, rawlink.Over("lan0", c), raTestMAC, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("returned after %s, before the context ended (500ms)", took)
	}
	h := time.Hour
	want := []Router{
		{Source: llA, MAC: raRouterA, Managed: true, Other: true, Lifetime: 30 * time.Minute, MTU: 1480, Prefixes: []RAPrefix{
			{Prefix: netip.MustParsePrefix("2001:db8:70::/64"), OnLink: true, Autonomous: true, Valid: 24 * h, Preferred: 4 * h},
			{Prefix: netip.MustParsePrefix("2001:db8:71::/48"), OnLink: true, Valid: 0xffffffff * time.Second, Preferred: 0xffffffff * time.Second}}},
		{Source: llB, MAC: raRouterB, Other: true, Lifetime: 10 * time.Minute, Prefixes: []RAPrefix{
			{Prefix: netip.MustParsePrefix("2001:db8:72::/64"), Autonomous: true, Valid: h, Preferred: h / 2}}},
	}
	if fmt.Sprint(routers) != fmt.Sprint(want) {
		t.Fatalf("routers\n%v\nwant\n%v", routers, want)
	}
	select {
	case <-c.closed:
	default:
		t.Error("the socket stays open after Routers")
	}
}

// Routers refuses a MAC that is not Ethernet unicast, and names a parent
// it cannot open (no root needed: the link is looked up first).
func TestRoutersErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := Routers(ctx, netns.None(), "lan0", net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}); err == nil || !strings.Contains(err.Error(), "33:33:00:00:00:01") {
		t.Errorf("Routers from a multicast MAC: %v, want it refused", err)
	}
	if _, err := Routers(ctx, netns.None(), "nosuch-lc0", raTestMAC); err == nil || !strings.Contains(err.Error(), "nosuch-lc0") {
		t.Errorf("Routers on a missing parent: %v, want an error naming it", err)
	}
	// A socket whose writes fail: the error says the solicitation was not sent.
	c := newRAConn()
	c.Close()
	if _, err := solicitRouters(ctx, rawlink.Over("lan0", c), raTestMAC, time.Second); err == nil || !strings.Contains(err.Error(), "router solicitation on parent lan0") {
		t.Errorf("Routers over a closed socket: %v, want the send's error", err)
	}
}
