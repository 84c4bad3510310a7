package dhcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/itest"
)

// memWire is an Ethernet segment in memory, for tests without root: a
// Client built WithConn(w.open) exchanges frames with servers (the
// itest's scriptable DHCPServer) served on it. Frames a client writes
// reach every server; what a server writes reaches every open client end,
// IP-fragmented when it is larger than the MTU, as a kernel would.
type memWire struct {
	t       *testing.T
	mtu     int
	mu      sync.Mutex
	clients map[*wireEnd]bool
	servers []*wireServer
	opened  int
}

func newWire(t *testing.T) *memWire {
	return &memWire{t: t, mtu: 1500, clients: map[*wireEnd]bool{}}
}

// client is a Client on the wire, retransmitting fast.
func (w *memWire) client() *Client {
	return New(WithConn(w.open), WithRetransmit(300*time.Millisecond))
}

func (w *memWire) open(parent string) (net.PacketConn, error) {
	if parent != lanParent {
		return nil, fmt.Errorf("parent %s: no such link on the test wire", parent)
	}
	e := &wireEnd{w: w, in: make(chan []byte, 1024), closed: make(chan struct{})}
	w.mu.Lock()
	w.clients[e] = true
	w.opened++
	w.mu.Unlock()
	return e, nil
}

// serve starts a server on the wire.
func (w *memWire) serve(cfg itest.DHCPConfig) *itest.DHCPServer {
	s := itest.NewDHCPServer(w.t, serverAddr, cfg)
	id := cfg.ID
	if !id.IsValid() {
		id = serverAddr.Addr()
	}
	e := &wireServer{w: w, id: id, mac: mac(200 + len(w.servers)), in: make(chan []byte, 1024), closed: make(chan struct{})}
	w.mu.Lock()
	w.servers = append(w.servers, e)
	w.mu.Unlock()
	s.ServeConn(nclient4.NewBroadcastUDPConn(e, &net.UDPAddr{Port: serverPort}))
	return s
}

// wireEnd is a client's end: whole Ethernet frames.
type wireEnd struct {
	w      *memWire
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (e *wireEnd) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-e.in:
		return copy(b, f), &packet.Addr{HardwareAddr: net.HardwareAddr(f[6:12])}, nil
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
	e.w.mu.Lock()
	servers := append([]*wireServer(nil), e.w.servers...)
	e.w.mu.Unlock()
	for _, s := range servers {
		if len(b) > ethHeader {
			select {
			case s.in <- append([]byte(nil), b[ethHeader:]...):
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
		delete(e.w.clients, e)
		e.w.mu.Unlock()
	})
	return nil
}

func (e *wireEnd) LocalAddr() net.Addr                 { return &packet.Addr{HardwareAddr: testMAC} }
func (e *wireEnd) SetDeadline(time.Time) error         { return nil }
func (e *wireEnd) SetReadDeadline(time.Time) error     { return nil }
func (e *wireEnd) SetWriteDeadline(time.Time) error    { return nil }
func (s *wireServer) LocalAddr() net.Addr              { return &net.UDPAddr{IP: s.id.AsSlice(), Port: serverPort} }
func (s *wireServer) SetDeadline(time.Time) error      { return nil }
func (s *wireServer) SetReadDeadline(time.Time) error  { return nil }
func (s *wireServer) SetWriteDeadline(time.Time) error { return nil }

// wireServer is a server's end: IPv4 packets, as nclient4's
// BroadcastUDPConn reads and writes them on a datagram packet socket.
type wireServer struct {
	w      *memWire
	id     netip.Addr
	mac    net.HardwareAddr
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (s *wireServer) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-s.in:
		return copy(b, p), &packet.Addr{}, nil
	case <-s.closed:
		return 0, nil, net.ErrClosed
	}
}

// WriteTo frames the IPv4 packet ip from the server's address and MAC,
// fragments it to the MTU, and hands the frames to every client end.
func (s *wireServer) WriteTo(ip []byte, _ net.Addr) (int, error) {
	ihl := int(ip[0]&0x0f) * 4
	udp := ip[ihl:]
	dst := netip.AddrFrom4([4]byte(ip[16:20]))
	f := udpFrame(s.mac, s.id, dst, binary.BigEndian.Uint16(udp[0:2]), binary.BigEndian.Uint16(udp[2:4]), udp[udpHeader:])
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for _, fr := range fragments(f, s.w.mtu) {
		for e := range s.w.clients {
			select {
			case e.in <- fr:
			default:
			}
		}
	}
	return len(ip), nil
}

func (s *wireServer) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// fragments splits an Ethernet frame's IPv4 packet (20-byte header) into
// fragments of at most mtu bytes, as RFC 791 has it.
func fragments(f []byte, mtu int) [][]byte {
	ip := f[ethHeader:]
	if len(ip) <= mtu {
		return [][]byte{f}
	}
	payload, step := ip[ipv4Header:], (mtu-ipv4Header)/8*8
	var out [][]byte
	for off := 0; off < len(payload); off += step {
		end := min(off+step, len(payload))
		fr := append(append([]byte(nil), f[:ethHeader+ipv4Header]...), payload[off:end]...)
		h := fr[ethHeader : ethHeader+ipv4Header]
		binary.BigEndian.PutUint16(h[2:4], uint16(ipv4Header+end-off))
		flags := uint16(off / 8)
		if end < len(payload) {
			flags |= 0x2000 // More Fragments
		}
		binary.BigEndian.PutUint16(h[6:8], flags)
		binary.BigEndian.PutUint16(h[10:12], 0)
		binary.BigEndian.PutUint16(h[10:12], ^sum(h, 0))
		out = append(out, fr)
	}
	return out
}
