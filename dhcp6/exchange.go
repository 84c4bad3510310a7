package dhcp6

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/underlay-net/underlay/internal/rawlink"
)

// verdict is what an exchange does with a reply.
type verdict int

const (
	skip verdict = iota // not an answer: keep waiting
	take                // the answer: the exchange ends with it
	keep                // an answer; a better one may come within the collect time
)

// exchange is one message and its retransmissions until an answer.
type exchange struct {
	typ    dhcpv6.MessageType
	addr   netip.Addr // the address it is about, if any
	server []byte     // the server's DUID, for messages addressed to one
	rapid  bool       // a Solicit with Rapid Commit
	// sends bounds the transmissions (0: until ctx ends).
	sends int
	// accept judges a reply that is the client's; rank orders kept ones.
	accept func(m *dhcpv6.Message) (verdict, int)
	// saw, if set, gets every reply that is the client's, before accept.
	saw func(rep reply)
}

// run sends the exchange's message for r on p with a fresh transaction
// ID, and retransmits it (same ID, the elapsed time updated) after the
// retransmission timeout, doubled each time up to 16 s, until accept
// takes a reply, the collect time after the first kept one ends (the
// best kept is the answer), the sends are done or ctx ends. It returns
// the reply and when the message was first sent. Replies that are not
// for r (another client identifier, another destination MAC) are
// dropped unseen; seen collects what accept noted.
func (c *Client) run(ctx context.Context, p *rawlink.Port[dhcpv6.TransactionID, reply], r *Request, x exchange) (*dhcpv6.Message, time.Time, error) {
	xid, ch := p.Register(newXID)
	defer p.Unregister(xid)
	first := time.Now()
	rt := jitter(c.retransmit)
	var best *dhcpv6.Message
	bestRank := -1
	var collect <-chan time.Time
	timer := time.NewTimer(rt)
	defer timer.Stop()
	for n := 1; ; n++ {
		m, err := build(x.typ, xid, r, x.addr, x.server, time.Since(first), x.rapid)
		if err != nil {
			return nil, first, err
		}
		if err := p.Send(frameOf(r, m)); err != nil {
			return nil, first, fmt.Errorf("send DHCPv6 %s on parent %s: %w: check that the link is up", x.typ, p.Parent(), err)
		}
		c.log.Debug("dhcp6 sent", "type", x.typ.String(), "parent", p.Parent(), "xid", xid.String(), "mac", r.MAC.String())
		timer.Reset(rt)
	read:
		for {
			select {
			case <-ctx.Done():
				if best != nil {
					return best, first, nil
				}
				return nil, first, ctx.Err()
			case <-collect:
				return best, first, nil
			case <-timer.C:
				break read
			case rep := <-ch:
				if !bytes.Equal(rep.dstMAC, r.MAC) || !sameDUID(rep.m.Options.ClientID(), r.DUID) {
					continue
				}
				if x.saw != nil {
					x.saw(rep)
				}
				v, rank := x.accept(rep.m)
				switch {
				case v == take:
					c.log.Debug("dhcp6 received", "type", rep.m.MessageType.String(), "parent", p.Parent(), "xid", xid.String(), "mac", r.MAC.String())
					return rep.m, first, nil
				case v == keep && rank > bestRank:
					best, bestRank = rep.m, rank
					if collect == nil {
						collect = time.After(c.collect)
					}
				}
			}
		}
		if x.sends > 0 && n >= x.sends {
			if best != nil {
				return best, first, nil
			}
			return nil, first, errSendsDone
		}
		rt = jitter(min(2*rt, 16*time.Second))
	}
}

// errSendsDone ends an exchange whose last retransmission went unanswered.
var errSendsDone = errors.New("no answer to the last retransmission")

// jitter is d ±10% (RFC 8415 section 15's RAND).
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/5)+1)) - d/10
}

// notes collect what an exchange saw beside its answer, for an error.
type notes []string

func (n *notes) add(s string) {
	if !slices.Contains(*n, s) {
		*n = append(*n, s)
	}
}

// String is "" or "; " and what was seen.
func (n notes) String() string {
	if len(n) == 0 {
		return ""
	}
	return "; " + strings.Join(n, "; ")
}

// failed explains an exchange that got no answer.
func failed(ctx context.Context, err error, start time.Time, what string, seen notes) error {
	waited := time.Since(start).Round(time.Millisecond)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errSendsDone):
		return fmt.Errorf("%w %s within %s%s: check that a DHCPv6 server serves that LAN and that the parent is up, or give it more time: %w",
			ErrNoAnswer, what, waited, seen, err)
	case ctx.Err() != nil:
		return fmt.Errorf("DHCPv6 %s: gave up after %s%s: %w", what, waited, seen, err)
	}
	return err
}

// fromServer accepts a Reply from server (any server when nil) that has a
// server identifier, and notes the others.
func fromServer(server []byte, seen *notes) func(m *dhcpv6.Message) (verdict, int) {
	return func(m *dhcpv6.Message) (verdict, int) {
		if m.MessageType != dhcpv6.MessageTypeReply {
			return skip, 0
		}
		sid := m.Options.ServerID()
		switch {
		case sid == nil:
			seen.add("ignored a Reply without a server identifier (option 2, which RFC 8415 section 16.10 requires)")
			return skip, 0
		case server != nil && !sameDUID(sid, server):
			seen.add(fmt.Sprintf("ignored a Reply from server %x, which was not asked (the message named %x)", sid.ToBytes(), server))
			return skip, 0
		}
		return take, 0
	}
}
