package dhcp

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// port is the one packet socket of a client on a parent link, shared by
// every transaction on that parent: a raw ETH_P_IP socket filtered to UDP
// port 68, whose replies go to the transaction with their xid. It exists
// while a transaction uses it.
type port struct {
	parent string
	raw    *packet.Conn
	conn   net.PacketConn // raw, parsed by the library: DHCP payloads
	refs   int            // guarded by Client.mu
	closed chan struct{}  // closed before the socket
	turn   chan struct{}  // held by the Acquire that runs (one at a time)
	done   chan struct{}  // closed when the receive loop ends

	mu      sync.Mutex
	waiters map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
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
	raw, err := c.listen(parent)
	if err != nil {
		return nil, err
	}
	p := &port{parent: parent, raw: raw, refs: 1, closed: make(chan struct{}), done: make(chan struct{}), turn: make(chan struct{}, 1),
		conn:    nclient4.NewBroadcastUDPConn(ethConn{raw}, &net.UDPAddr{Port: clientPort}),
		waiters: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
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
		ch := p.waiters[m.TransactionID]
		if ch != nil {
			select {
			case ch <- m:
			default: // the transaction has not read the last ones: drop
			}
		}
		p.mu.Unlock()
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

// exchange sends a message built by build with a fresh xid, and resends it
// (same xid) after c.retransmit, doubling up to 16 s, until accept takes a
// reply of the client r or ctx ends. It returns the reply and when the
// message was first sent.
func (c *Client) exchange(ctx context.Context, p *port, r Request, build func(dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error),
	dst netip.Addr, accept func(*dhcpv4.DHCPv4) bool) (*dhcpv4.DHCPv4, time.Time, error) {
	xid, ch := p.register()
	defer p.unregister(xid)
	m, err := build(xid)
	if err != nil {
		return nil, time.Time{}, err
	}
	f := frame(r.MAC, netip.IPv4Unspecified(), dst, m.ToBytes())
	first := time.Now()
	wait := c.retransmit
	for {
		if _, err := p.raw.WriteTo(f, &packet.Addr{HardwareAddr: broadcastMAC}); err != nil {
			return nil, first, fmt.Errorf("send DHCP%s on parent %s: %w: check that the link is up", m.MessageType(), p.parent, err)
		}
		c.log.Debug("dhcp sent", "type", m.MessageType().String(), "parent", p.parent, "xid", xid.String(), "mac", r.MAC.String())
		timer := time.NewTimer(wait)
	read:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, first, ctx.Err()
			case <-timer.C:
				break read
			case reply := <-ch:
				if mine(r, reply) && accept(reply) {
					timer.Stop()
					c.log.Debug("dhcp received", "type", reply.MessageType().String(), "parent", p.parent, "xid", xid.String(), "mac", r.MAC.String())
					return reply, first, nil
				}
			}
		}
		wait = min(2*wait, 16*time.Second)
	}
}

// register reserves an xid no other transaction on the port holds.
func (p *port) register() (dhcpv4.TransactionID, chan *dhcpv4.DHCPv4) {
	ch := make(chan *dhcpv4.DHCPv4, 8)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		var xid dhcpv4.TransactionID
		_, _ = rand.Read(xid[:]) // crypto/rand.Read never fails (Go 1.24+)
		if p.waiters[xid] == nil {
			p.waiters[xid] = ch
			return xid, ch
		}
	}
}

func (p *port) unregister(xid dhcpv4.TransactionID) {
	p.mu.Lock()
	delete(p.waiters, xid)
	p.mu.Unlock()
}
