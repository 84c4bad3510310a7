package dhcp6

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A client's port on a parent is a rawlink.Port, shared by every
// transaction on that parent: replies go to the transaction with their
// transaction ID, and Neighbour Solicitations for the link-local address
// of an endpoint with a transaction under way are answered (claim).

// reply is a DHCPv6 message as received, with its frame's Ethernet
// addresses and its IPv6 source.
type reply struct {
	m              *dhcpv6.Message
	dstMAC, srcMAC net.HardwareAddr
	src            netip.Addr
}

// link opens the parent's link for its port: SOCK_RAW, ETH_P_ALL (see
// the package documentation), with the reply filter attached before it
// is bound.
func (c *Client) link(parent string) (*rawlink.Link, error) {
	return c.links.Open(parent, rawlink.Config{Who: "the DHCPv6 client's", Proto: unix.ETH_P_ALL,
		Filter: replyFilter(), For: " for DHCPv6", Ethernet: "DHCPv6 for endpoints needs an Ethernet link"})
}

// newXID draws a transaction ID.
func newXID() (xid dhcpv6.TransactionID) {
	_, _ = rand.Read(xid[:]) // crypto/rand.Read never fails (Go 1.24+)
	return xid
}

// take checks r and takes the port of its parent for a call (what names
// it in errors), claimed for r: r's MAC joins the parent's unicast filter
// (unless it is the parent's own) and its link-local address's
// solicited-node group the multicast filter, and Neighbour Solicitations
// for that address are answered with r's MAC. done undoes it all.
func (c *Client) take(r *Request, what string) (p *rawlink.Port[dhcpv6.TransactionID, reply], done func(), err error) {
	if err := r.check(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return c.ports.Take(r.Parent, &rawlink.Claim{MAC: r.MAC, LinkLocal: r.source(), For: "DHCPv6 replies"})
}

// demux reads a frame on a port: a DHCPv6 message to port 546, for the
// transaction with its ID. Anything else or malformed is dropped.
func demux(f []byte) (dhcpv6.TransactionID, reply, bool) {
	d, ok := rawlink.ParseUDP(f, clientPort)
	if !ok || !d.Src.Is6() || len(d.Data) < 4 {
		return dhcpv6.TransactionID{}, reply{}, false
	}
	m := parse(d.Data)
	if m == nil {
		return dhcpv6.TransactionID{}, reply{}, false
	}
	return m.TransactionID, reply{m: m, dstMAC: bytes.Clone(d.DstMAC), srcMAC: bytes.Clone(d.SrcMAC), src: d.Src}, true
}

// parse decodes a DHCPv6 client-server message, or returns nil for
// anything else or malformed, even one that made the parser panic.
func parse(b []byte) *dhcpv6.Message {
	d, _ := rawlink.Decode(b, dhcpv6.FromBytes)
	m, _ := d.(*dhcpv6.Message)
	return m
}

// replyFilter keeps, of the frames the parent receives (not those it
// sends), untagged IPv6 with UDP to port 546 or ICMPv6 Neighbour
// Solicitations (no extension headers): a busy parent does not wake the
// client for every packet.
func replyFilter() []bpf.Instruction {
	const eth, ip6 = rawlink.EthHeader, rawlink.IPv6Header
	return rawlink.Untagged([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 10},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.EtherIPv6, SkipTrue: 8},
		bpf.LoadAbsolute{Off: eth + 6, Size: 1}, // next header
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: rawlink.ProtoUDP, SkipFalse: 2},
		bpf.LoadAbsolute{Off: eth + ip6 + 2, Size: 2}, // UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clientPort, SkipTrue: 3, SkipFalse: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.ProtoICMPv6, SkipTrue: 3},
		bpf.LoadAbsolute{Off: eth + ip6, Size: 1}, // ICMPv6 type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.NDPSolicitation, SkipTrue: 1},
		bpf.RetConstant{Val: 0x40000},
		bpf.RetConstant{Val: 0},
	})
}
