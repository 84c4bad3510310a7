package rawlink

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// pipe is a frame connection: frames put in are read, frames written
// are kept.
type pipe struct {
	net.PacketConn
	in     chan []byte
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	out    [][]byte
}

func newPipe() *pipe { return &pipe{in: make(chan []byte, 16), closed: make(chan struct{})} }

func (p *pipe) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-p.in:
		return copy(b, f), nil, nil
	case <-p.closed:
		return 0, nil, net.ErrClosed
	}
}

func (p *pipe) WriteTo(b []byte, _ net.Addr) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, append([]byte(nil), b...))
	return len(b), nil
}

func (p *pipe) Close() error { p.once.Do(func() { close(p.closed) }); return nil }

func (p *pipe) sent() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out
}

// keyed is a test protocol on UDP port 9: the key is the first byte.
func keyed(f []byte) (byte, string, bool) {
	d, ok := ParseUDP(f, 9)
	if !ok || len(d.Data) < 1 {
		return 0, "", false
	}
	return d.Data[0], string(d.Data[1:]), true
}

func TestPortDemux(t *testing.T) {
	var opened []*pipe
	ports := NewPorts(func(parent string) (*Link, error) {
		if parent == "nope" {
			return nil, errors.New("no such parent")
		}
		p := newPipe()
		opened = append(opened, p)
		return Over(parent, p), nil
	}, keyed)
	if _, err := ports.Get("nope"); err == nil {
		t.Fatal("Get of a parent that does not open")
	}
	a, err := ports.Get("eth0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ports.Get("eth0")
	if a != b || len(opened) != 1 || ports.Open() != 1 || a.Parent() != "eth0" {
		t.Fatalf("two Gets of one parent: %p %p, %d opened, %d open", a, b, len(opened), ports.Open())
	}
	next := byte(0)
	fresh := func() byte { next++; return next / 2 } // 0, 1, 1, 2, ...: a taken key is drawn again
	k1, ch1 := a.Register(fresh)
	k2, ch2 := a.Register(fresh)
	if k1 == k2 {
		t.Fatalf("two transactions hold key %d", k1)
	}
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	frame := func(k byte, s string) []byte { return UDP4(macA, macB, src, dst, 1, 9, append([]byte{k}, s...)) }
	in := opened[0].in
	in <- UDP4(macA, macB, src, dst, 1, 10, []byte{k1, 'x'}) // another port: dropped
	in <- frame(99, "nobody")                                // no transaction: dropped
	in <- frame(k2, "two")
	in <- frame(k1, "one")
	for ch, want := range map[<-chan string]string{ch1: "one", ch2: "two"} {
		select {
		case got := <-ch:
			if got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %q", want)
		}
	}
	a.Unregister(k1)
	in <- frame(k1, "late")
	in <- frame(k2, "two again")
	if got := <-ch2; got != "two again" {
		t.Fatalf("got %q", got)
	}
	select {
	case got := <-ch1:
		t.Fatalf("an unregistered transaction got %q", got)
	default:
	}
	ports.Put(b)
	select {
	case <-opened[0].closed:
		t.Fatal("the port closed with a user left")
	default:
	}
	ports.Put(a)
	select { // closed in the background (CloseLater)
	case <-opened[0].closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the port's link is still open 5 s after the last Put")
	}
	if ports.Open() != 0 {
		t.Fatalf("%d ports open after the last Put", ports.Open())
	}
	c, _ := ports.Get("eth0")
	defer ports.Put(c)
	if c == a || len(opened) != 2 {
		t.Fatal("a Get after the last Put did not open the parent anew")
	}
}

// TestPortAnswers: a port answers Neighbour Solicitations for the
// addresses claimed on it, while they are, with a solicited NA.
func TestPortAnswers(t *testing.T) {
	conn := newPipe()
	ports := NewPorts(func(parent string) (*Link, error) { return Over(parent, conn), nil }, keyed)
	ll, asker := netip.MustParseAddr("fe80::42:c6ff:fe12:b401"), netip.MustParseAddr("fe80::9")
	hold, err := ports.Get("eth0") // keeps the port open past done
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Put(hold)
	p, done, err := ports.Take("eth0", &Claim{MAC: macA, LinkLocal: ll, For: "test replies"})
	if err != nil {
		t.Fatal(err)
	}
	ns := func(target netip.Addr) []byte {
		m := make([]byte, NDPBodyLen)
		m[0] = NDPSolicitation
		copy(m[8:24], target.AsSlice())
		return ICMPv6(macB, MulticastMAC(SolicitedNode(target)), asker, SolicitedNode(target), 255, m)
	}
	k, ch := p.Register(func() byte { return 7 })
	conn.in <- ns(netip.MustParseAddr("fe80::77")) // not claimed
	conn.in <- ns(ll)
	conn.in <- UDP6(macB, macA, asker, ll, 1, 9, []byte{k, 'k'}) // a reply after it: the loop has seen both
	<-ch
	sent := conn.sent()
	if len(sent) != 1 {
		t.Fatalf("%d frames sent, want one NA", len(sent))
	}
	want := Advertisement(macA, macB, ll, asker, NASolicited|NAOverride)
	if !bytes.Equal(sent[0], want) {
		t.Fatalf("sent\n% x, want\n% x", sent[0], want)
	}
	done()
	k, ch = hold.Register(func() byte { return 8 })
	conn.in <- ns(ll)
	conn.in <- UDP6(macB, macA, asker, ll, 1, 9, []byte{k, 'k'})
	<-ch
	if len(conn.sent()) != 1 {
		t.Fatal("answered for an address no longer claimed")
	}
}

func TestPause(t *testing.T) {
	if err := Pause(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Pause(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pause = %v, want the context's end", err)
	}
}
