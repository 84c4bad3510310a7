package rawlink

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Ports holds a client's ports, one per parent link, each open while a
// transaction on that parent uses it. K is the key that ties a reply to
// its transaction (a transaction ID), M what a transaction receives. It
// is safe for concurrent use.
type Ports[K comparable, M any] struct {
	open  func(parent string) (*Link, error)
	demux func(frame []byte) (K, M, bool)

	mu    sync.Mutex
	ports map[string]*Port[K, M]
}

// NewPorts returns the ports of a client: open opens a parent's link for
// its first user, and demux reads a received frame: the key of the
// transaction it is for and what that transaction receives, or false
// for a frame that is not a reply (it is dropped). demux runs on the
// receive loop, one frame at a time, and must not keep the frame.
func NewPorts[K comparable, M any](open func(parent string) (*Link, error), demux func(frame []byte) (K, M, bool)) *Ports[K, M] {
	return &Ports[K, M]{open: open, demux: demux, ports: map[string]*Port[K, M]{}}
}

// Port is the link of a client on a parent, shared by every transaction
// on that parent; transactions on it overlap. Its one receive loop hands
// each reply to the transaction registered under its key, and answers
// Neighbour Solicitations for the addresses claimed on it.
type Port[K comparable, M any] struct {
	link   *Link
	demux  func(frame []byte) (K, M, bool)
	refs   int           // guarded by Ports.mu
	closed chan struct{} // closed before the link

	mu      sync.Mutex
	waiters map[K]chan M
	owners  map[netip.Addr]*owner
}

// owner is a link-local address a port answers Neighbour Solicitations for.
type owner struct {
	mac  net.HardwareAddr
	refs int
}

// Get returns parent's port, opening it for the first user; the caller
// gives it back with Put.
func (ps *Ports[K, M]) Get(parent string) (*Port[K, M], error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.ports[parent]; p != nil {
		p.refs++
		return p, nil
	}
	l, err := ps.open(parent)
	if err != nil {
		return nil, err
	}
	p := &Port[K, M]{link: l, demux: ps.demux, refs: 1, closed: make(chan struct{}),
		waiters: map[K]chan M{}, owners: map[netip.Addr]*owner{}}
	ps.ports[parent] = p
	go p.receive()
	return p, nil
}

// Claim is what Take claims on a port for a transaction: see Port.Claim.
type Claim struct {
	MAC       net.HardwareAddr
	LinkLocal netip.Addr
	// For names the replies awaited, in errors ("DHCPv6 replies").
	For string
}

// Take is Get, and the Claim of claim unless it is nil, in one: the
// func it returns undoes both.
func (ps *Ports[K, M]) Take(parent string, claim *Claim) (*Port[K, M], func(), error) {
	p, err := ps.Get(parent)
	if err != nil {
		return nil, nil, err
	}
	if claim == nil {
		return p, func() { ps.Put(p) }, nil
	}
	undo, err := p.Claim(claim.MAC, claim.LinkLocal, claim.For)
	if err != nil {
		ps.Put(p)
		return nil, nil, err
	}
	return p, func() { undo(); ps.Put(p) }, nil
}

// Put gives a port back; the last user closes it.
func (ps *Ports[K, M]) Put(p *Port[K, M]) {
	ps.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(ps.ports, p.link.parent)
	}
	ps.mu.Unlock()
	if last {
		close(p.closed)
		// The receive loop ends at the close, which the last user does
		// not wait for (CloseLater); it hands nothing on after closed.
		p.link.CloseLater()
	}
}

// Open is how many ports are open.
func (ps *Ports[K, M]) Open() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.ports)
}

// receive hands each reply to the transaction waiting for its key and
// answers Neighbour Solicitations for the claimed addresses, until the
// link closes. What demux does not take is dropped.
func (p *Port[K, M]) receive() {
	buf := make([]byte, 65536)
	for {
		n, _, err := p.link.ReadFrom(buf)
		select {
		case <-p.closed: // given back: the socket is closing
			return
		default:
		}
		if err != nil {
			// e.g. ENETDOWN while the parent is down: wait.
			select {
			case <-p.closed:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		if p.answer(buf[:n]) {
			continue
		}
		k, m, ok := p.demux(buf[:n])
		if !ok {
			continue
		}
		p.mu.Lock()
		if ch := p.waiters[k]; ch != nil {
			select {
			case ch <- m:
			default: // the transaction has not read the last ones: drop
			}
		}
		p.mu.Unlock()
	}
}

// Parent is the name of the port's parent link.
func (p *Port[K, M]) Parent() string { return p.link.parent }

// Send writes frame f to its Ethernet destination.
func (p *Port[K, M]) Send(f []byte) error { return p.link.Send(f) }

// Register reserves a key, drawn by fresh until no other transaction on
// the port holds it, and returns the channel its replies come on; the
// caller gives it back with Unregister.
func (p *Port[K, M]) Register(fresh func() K) (K, <-chan M) {
	ch := make(chan M, 8)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		k := fresh()
		if p.waiters[k] == nil {
			p.waiters[k] = ch
			return k, ch
		}
	}
}

// Unregister gives a key back.
func (p *Port[K, M]) Unregister(k K) {
	p.mu.Lock()
	delete(p.waiters, k)
	p.mu.Unlock()
}

// Claim makes p receive for mac and answer for the link-local address ll
// until the returned func is called: mac joins the parent's unicast
// filter (unless it is the parent's own) and ll's solicited-node group
// the multicast filter, and Neighbour Solicitations for ll are answered
// with mac (the endpoint's link does not exist yet, or is in a
// container, so no kernel answers for it). what names the replies
// awaited, in errors ("DHCPv6 replies").
func (p *Port[K, M]) Claim(mac net.HardwareAddr, ll netip.Addr, what string) (func(), error) {
	var undo []func()
	release := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if err := p.link.Join(Unicast, mac); err != nil {
		return nil, fmt.Errorf("add MAC %s to the unicast filter of parent %s, to receive %s to it: %w (it needs CAP_NET_RAW)", mac, p.link.parent, what, err)
	}
	undo = append(undo, func() { _ = p.link.Leave(Unicast, mac) })
	g := MulticastMAC(SolicitedNode(ll))
	if err := p.link.Join(Multicast, g); err != nil {
		release()
		return nil, fmt.Errorf("join the Ethernet multicast group %s on parent %s, to answer Neighbour Solicitations for %s: %w (it needs CAP_NET_RAW)", g, p.link.parent, ll, err)
	}
	undo = append(undo, func() { _ = p.link.Leave(Multicast, g) })
	p.mu.Lock()
	o := p.owners[ll]
	if o == nil {
		o = &owner{mac: mac}
		p.owners[ll] = o
	}
	o.refs++
	p.mu.Unlock()
	undo = append(undo, func() {
		p.mu.Lock()
		if o.refs--; o.refs == 0 {
			delete(p.owners, ll)
		}
		p.mu.Unlock()
	})
	return release, nil
}

// answer sends a solicited Neighbour Advertisement (RFC 4861 section
// 7.2.4: Solicited and Override set) for a claimed address to the node
// that solicited it, if f is such a Solicitation from a unicast address.
func (p *Port[K, M]) answer(f []byte) bool {
	target, in, ok := Solicitation(f)
	if !ok || in.Src.IsUnspecified() || in.Src.IsMulticast() {
		return false
	}
	p.mu.Lock()
	o := p.owners[target]
	p.mu.Unlock()
	select {
	case <-p.closed: // given back after the read: its claims are undone
		return true
	default:
	}
	if o != nil {
		_ = p.link.Send(Advertisement(o.mac, in.SrcMAC, target, in.Src, NASolicited|NAOverride))
	}
	return true
}

// Pause waits d, or until ctx ends (its error): a transaction's pause
// between two rounds.
func Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
