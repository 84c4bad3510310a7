package dhcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/sys/unix"
)

// link opens the parent's link for its port.
func (c *Client) link(parent string) (*rawlink.Link, error) {
	return c.links.Open(parent, rawlink.Config{Who: "the DHCP client's", Proto: unix.ETH_P_IP,
		Filter: replyFilter(), For: " for DHCP"})
}

// newXID draws a transaction ID.
func newXID() (xid dhcpv4.TransactionID) {
	_, _ = rand.Read(xid[:]) // crypto/rand.Read never fails (Go 1.24+)
	return xid
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
// reply of the client r (from the Ethernet source from), says stop, or
// ctx ends; a reply it refuses (again)
// brings the next send forward to againWait. It returns the reply and when
// the message was first sent. What it saw beside (fragments) goes to seen.
func (c *Client) exchange(ctx context.Context, p *rawlink.Port[dhcpv4.TransactionID, reply], r Request, build func(dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error),
	accept func(m *dhcpv4.DHCPv4, from net.HardwareAddr) verdict, seen *notes) (*dhcpv4.DHCPv4, time.Time, error) {
	xid, w := p.Register(newXID)
	defer p.Unregister(xid)
	m, err := build(xid)
	if err != nil {
		return nil, time.Time{}, err
	}
	f := frame(r.MAC, netip.IPv4Unspecified(), broadcastIP, m.ToBytes())
	first := time.Now()
	wait := c.retransmit
	for {
		if err := p.Send(f); err != nil {
			return nil, first, fmt.Errorf("send DHCP%s on parent %s: %w: check that the link is up", m.MessageType(), p.Parent(), err)
		}
		c.log.Debug("dhcp sent", "type", m.MessageType().String(), "parent", p.Parent(), "xid", xid.String(), "mac", r.MAC.String())
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
			case in := <-w:
				if in.frag != "" {
					seen.fragmented(in.frag)
					continue
				}
				reply := in.m
				if !mine(r, reply) {
					continue
				}
				switch accept(reply, in.from) {
				case take:
					timer.Stop()
					c.log.Debug("dhcp received", "type", reply.MessageType().String(), "parent", p.Parent(), "xid", xid.String(), "mac", r.MAC.String())
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
