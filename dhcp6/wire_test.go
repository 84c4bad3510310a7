package dhcp6

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/mdlayher/packet"
)

// wire is an Ethernet segment in memory, for tests without root: a Client
// built WithConn(w.open) writes frames that every server on the wire
// gets (after the test checks their framing); what a server answers is
// framed to the sender's MAC and link-local address, as a kernel that
// resolved it by Neighbour Discovery would.
type wire struct {
	t       *testing.T
	mu      sync.Mutex
	ends    map[*wireEnd]bool
	servers []*fakeServer
	frames  [][]byte // frames clients wrote that are not DHCPv6 (NAs)
}

const testParent = "lan0"

func newWire(t *testing.T) *wire { return &wire{t: t, ends: map[*wireEnd]bool{}} }

// client is a Client on the wire, retransmitting fast.
func (w *wire) client(opts ...Option) *Client {
	return New(append([]Option{WithConn(w.open), WithRetransmit(100 * time.Millisecond), WithCollect(20 * time.Millisecond)}, opts...)...)
}

func (w *wire) open(parent string) (net.PacketConn, error) {
	if parent != testParent {
		return nil, fmt.Errorf("parent %s: no such link on the test wire", parent)
	}
	e := &wireEnd{w: w, in: make(chan []byte, 1024), closed: make(chan struct{})}
	w.mu.Lock()
	w.ends[e] = true
	w.mu.Unlock()
	return e, nil
}

// inject delivers a raw frame to every open client end.
func (w *wire) inject(f []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for e := range w.ends {
		select {
		case e.in <- append([]byte(nil), f...):
		default:
		}
	}
}

func (w *wire) openEnds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ends)
}

// endsClosed waits up to 5 s for every end to be closed (the client's
// port closes its link in the background: rawlink.Link.CloseLater) and
// returns how many stay open.
func (w *wire) endsClosed() int {
	deadline := time.Now().Add(5 * time.Second)
	for w.openEnds() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return w.openEnds()
}

// sent returns the non-DHCPv6 frames clients wrote.
func (w *wire) sent() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.frames...)
}

// wireEnd is a client's end: whole Ethernet frames.
type wireEnd struct {
	w      *wire
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (e *wireEnd) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-e.in:
		return copy(b, f), &packet.Addr{}, nil
	case <-e.closed:
		return 0, nil, net.ErrClosed
	}
}

func (e *wireEnd) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case <-e.closed:
		return 0, net.ErrClosed
	default:
	}
	src, m, err := clientMessage(b)
	if err != nil {
		e.w.mu.Lock()
		e.w.frames = append(e.w.frames, append([]byte(nil), b...))
		e.w.mu.Unlock()
		return len(b), nil
	}
	e.w.mu.Lock()
	servers := append([]*fakeServer(nil), e.w.servers...)
	e.w.mu.Unlock()
	for _, s := range servers {
		for _, out := range s.handle(m) {
			to := net.HardwareAddr(b[6:12])
			if s.isMisdirected(out) {
				to = net.HardwareAddr{0x02, 0, 0, 0, 0xdd, 0xdd}
			}
			f := udpFrame(s.mac, to, s.ll, src, serverPort, clientPort, out.ToBytes())
			select {
			case e.in <- f:
			default:
			}
		}
	}
	return len(b), nil
}

func (e *wireEnd) Close() error {
	e.once.Do(func() {
		close(e.closed)
		e.w.mu.Lock()
		delete(e.w.ends, e)
		e.w.mu.Unlock()
	})
	return nil
}

func (e *wireEnd) LocalAddr() net.Addr              { return &packet.Addr{} }
func (e *wireEnd) SetDeadline(time.Time) error      { return nil }
func (e *wireEnd) SetReadDeadline(time.Time) error  { return nil }
func (e *wireEnd) SetWriteDeadline(time.Time) error { return nil }

// clientMessage checks a frame a client wrote as a server's kernel
// would (Ethernet to 33:33:00:01:00:02, IPv6 from a link-local address
// to ff02::1:2, UDP 546 to 547 with a valid checksum) and decodes it.
func clientMessage(f []byte) (netip.Addr, *dhcpv6.Message, error) {
	if len(f) < ethHeader+ipv6Header+udpHeader || binary.BigEndian.Uint16(f[12:14]) != etherIPv6 || f[ethHeader+6] != protoUDP {
		return netip.Addr{}, nil, fmt.Errorf("not IPv6 UDP")
	}
	ip := f[ethHeader:]
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	udp := ip[ipv6Header:]
	switch {
	case net.HardwareAddr(f[0:6]).String() != allServersMAC.String():
		return src, nil, fmt.Errorf("to MAC %s", net.HardwareAddr(f[0:6]))
	case !src.IsLinkLocalUnicast() || dst != allServers:
		return src, nil, fmt.Errorf("from %s to %s", src, dst)
	case binary.BigEndian.Uint16(udp[0:2]) != clientPort || binary.BigEndian.Uint16(udp[2:4]) != serverPort:
		return src, nil, fmt.Errorf("ports")
	case int(binary.BigEndian.Uint16(ip[4:6])) != len(udp) || int(binary.BigEndian.Uint16(udp[4:6])) != len(udp):
		return src, nil, fmt.Errorf("lengths")
	case sum(udp, pseudo(src, dst, protoUDP, len(udp))) != 0xffff:
		return src, nil, fmt.Errorf("bad UDP checksum")
	}
	d, err := dhcpv6.FromBytes(udp[udpHeader:])
	if err != nil {
		return src, nil, err
	}
	m, ok := d.(*dhcpv6.Message)
	if !ok {
		return src, nil, fmt.Errorf("a relay message")
	}
	return src, m, nil
}
