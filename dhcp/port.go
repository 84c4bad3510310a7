package dhcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// port is the one packet socket of a client on a parent link, shared by
// every transaction on that parent: a raw ETH_P_IP socket filtered to UDP
// port 68 (or the connection WithConn opened), whose replies go to the
// transaction with their xid. It exists while a transaction uses it.
// Transactions on a port overlap.
type port struct {
	parent string
	raw    net.PacketConn // whole Ethernet frames
	conn   net.PacketConn // raw, parsed by the library: DHCP payloads
	refs   int            // guarded by Client.mu
	closed chan struct{}  // closed before the socket
	done   chan struct{}  // closed when the receive loop ends

	mu      sync.Mutex
	waiters map[dhcpv4.TransactionID]*txn
}

// txn is a transaction waiting for replies on a port.
type txn struct {
	ch chan *dhcpv4.DHCPv4
	// frag describes the last IP-fragmented reply seen for the xid.
	frag atomic.Pointer[string]
}

// port returns the parent's port, opening it for the first user; the
// caller gives it back with put.
func (c *Client) port(parent string) (*port, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.ports[parent]; p != nil {
		p.refs++
		return p, nil
	}
	var raw net.PacketConn
	var err error
	if c.open != nil {
		raw, err = c.open(parent)
		if err == nil && raw == nil {
			err = fmt.Errorf("the connection opener gave no connection for parent %s", parent)
		}
	} else {
		raw, err = c.listen(parent)
	}
	if err != nil {
		return nil, err
	}
	p := &port{parent: parent, raw: raw, refs: 1, closed: make(chan struct{}), done: make(chan struct{}),
		waiters: map[dhcpv4.TransactionID]*txn{}}
	p.conn = nclient4.NewBroadcastUDPConn(ethConn{PacketConn: raw, fragment: p.fragment}, &net.UDPAddr{Port: clientPort})
	c.ports[parent] = p
	go p.receive()
	return p, nil
}

// put gives a port back; the last user closes it.
func (c *Client) put(p *port) {
	c.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(c.ports, p.parent)
	}
	c.mu.Unlock()
	if last {
		close(p.closed)
		_ = p.raw.Close()
		<-p.done
	}
}

// listen opens the packet socket on parent, in the client's namespace.
func (c *Client) listen(parent string) (*packet.Conn, error) {
	filter, err := replyFilter()
	if err != nil {
		return nil, fmt.Errorf("assemble the DHCP reply filter: %w", err)
	}
	var conn *packet.Conn
	err = c.inNetns(func() error {
		ifi, err := net.InterfaceByName(parent)
		if err != nil {
			return fmt.Errorf("parent %s: %w: give a link that exists in the daemon's namespace", parent, err)
		}
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IP, nil)
		if err != nil {
			return fmt.Errorf("open a packet socket on parent %s for DHCP: %w (it needs CAP_NET_RAW)", parent, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := conn.SetBPF(filter); err != nil {
		conn.Close()
		return nil, fmt.Errorf("attach the DHCP reply filter to the socket on parent %s: %w", parent, err)
	}
	return conn, nil
}

// inNetns runs fn on a thread in the client's namespace (sockets stay in
// the namespace they were made in). A thread that cannot return to its
// namespace is ended with its goroutine, never reused.
func (c *Client) inNetns(fn func() error) error {
	if !c.netns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("read this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(c.netns); err != nil {
			errc <- fmt.Errorf("enter the DHCP client's network namespace: %w", err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// receive hands each reply to the transaction waiting for its xid until
// the socket closes. A malformed packet is dropped.
func (p *port) receive() {
	defer close(p.done)
	buf := make([]byte, 4096)
	for {
		n, _, err := p.conn.ReadFrom(buf)
		if err != nil {
			// Closed, or e.g. ENETDOWN while the parent is down: wait.
			select {
			case <-p.closed:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		m := parse(buf[:n])
		if m == nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		p.mu.Lock()
		if w := p.waiters[m.TransactionID]; w != nil {
			select {
			case w.ch <- m:
			default: // the transaction has not read the last ones: drop
			}
		}
		p.mu.Unlock()
	}
}

// fragment notes a first fragment of a reply on its transaction, which
// gets no reply (fragments are not reassembled) but can say why.
func (p *port) fragment(ip []byte) {
	xid, src, size, ok := firstFragment(ip)
	if !ok {
		return
	}
	p.mu.Lock()
	w := p.waiters[dhcpv4.TransactionID(xid)]
	p.mu.Unlock()
	if w != nil {
		d := fmt.Sprintf("(%d bytes from %s), and fragments are not reassembled: make the server's replies fit one frame (they may be at most %d bytes, option 57), e.g. with fewer option 121 routes", size, src, maxMessageSize)
		w.frag.Store(&d)
	}
}

// parse decodes a DHCP message, or returns nil for anything malformed,
// even one that made the parser panic.
func parse(b []byte) (m *dhcpv4.DHCPv4) {
	defer func() {
		if recover() != nil {
			m = nil
		}
	}()
	m, err := dhcpv4.FromBytes(b)
	if err != nil {
		return nil
	}
	return m
}

// verdict is what an exchange does with a reply.
type verdict int

const (
	skip  verdict = iota // not an answer: keep waiting
	take                 // the answer: the exchange ends with it
	again                // refused: send again soon (at most every againWait)
	stop                 // refused, and no more tries: the exchange ends with errStop
)

// againWait is the shortest time between two messages of an exchange
// after a refusal, and between the rounds of an Acquire.
const againWait = 500 * time.Millisecond

// errStop ends an exchange whose accept said stop.
var errStop = errors.New("refused too many answers")

// exchange sends a message built by build with a fresh xid, and resends it
// (same xid) after c.retransmit, doubling up to 16 s, until accept takes a
// reply of the client r, says stop, or ctx ends; a reply it refuses (again)
// brings the next send forward to againWait. It returns the reply and when
// the message was first sent. What it saw beside (fragments) goes to seen.
func (c *Client) exchange(ctx context.Context, p *port, r Request, build func(dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error),
	accept func(*dhcpv4.DHCPv4) verdict, seen *notes) (*dhcpv4.DHCPv4, time.Time, error) {
	xid, w := p.register()
	defer p.unregister(xid)
	defer func() {
		if f := w.frag.Load(); f != nil {
			seen.fragmented(*f)
		}
	}()
	m, err := build(xid)
	if err != nil {
		return nil, time.Time{}, err
	}
	f := frame(r.MAC, netip.IPv4Unspecified(), broadcastIP, m.ToBytes())
	first := time.Now()
	wait := c.retransmit
	for {
		if _, err := p.raw.WriteTo(f, &packet.Addr{HardwareAddr: broadcastMAC}); err != nil {
			return nil, first, fmt.Errorf("send DHCP%s on parent %s: %w: check that the link is up", m.MessageType(), p.parent, err)
		}
		c.log.Debug("dhcp sent", "type", m.MessageType().String(), "parent", p.parent, "xid", xid.String(), "mac", r.MAC.String())
		sent := time.Now()
		timer := time.NewTimer(wait)
	read:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, first, ctx.Err()
			case <-timer.C:
				break read
			case reply := <-w.ch:
				if !mine(r, reply) {
					continue
				}
				switch accept(reply) {
				case take:
					timer.Stop()
					c.log.Debug("dhcp received", "type", reply.MessageType().String(), "parent", p.parent, "xid", xid.String(), "mac", r.MAC.String())
					return reply, first, nil
				case stop:
					timer.Stop()
					return nil, first, errStop
				case again:
					if againWait < wait {
						timer.Stop()
						timer = time.NewTimer(max(time.Until(sent.Add(againWait)), 0))
						wait = againWait
					}
				}
			}
		}
		wait = min(2*wait, 16*time.Second)
	}
}

// register reserves an xid no other transaction on the port holds.
func (p *port) register() (dhcpv4.TransactionID, *txn) {
	w := &txn{ch: make(chan *dhcpv4.DHCPv4, 8)}
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		var xid dhcpv4.TransactionID
		_, _ = rand.Read(xid[:]) // crypto/rand.Read never fails (Go 1.24+)
		if p.waiters[xid] == nil {
			p.waiters[xid] = w
			return xid, w
		}
	}
}

func (p *port) unregister(xid dhcpv4.TransactionID) {
	p.mu.Lock()
	delete(p.waiters, xid)
	p.mu.Unlock()
}
