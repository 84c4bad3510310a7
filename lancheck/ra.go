package lancheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/internal/rawlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Router discovery (RFC 4861 section 6), as a host joining the LAN does
// it: Router Solicitations from the unspecified address (so without a
// source link-layer address option, section 4.1), and the Router
// Advertisements that answer them, or come on their own, to all-nodes.

const (
	ndpRS = 133 // Router Solicitation
	ndpRA = 134 // Router Advertisement
	// raHeader is an RA's fixed part: type, code, checksum, cur hop
	// limit, flags, router lifetime, reachable time, retrans timer.
	raHeader = 16
	// rsLen is a Router Solicitation without options: type, code,
	// checksum, reserved.
	rsLen = 8
	// raManaged and raOther are the M and O flags of an RA's flags byte.
	raManaged, raOther = 0x80, 0x40
	// raOptPrefix and raOptMTU are the prefix information (32 bytes)
	// and MTU (8 bytes) options; pioOnLink and pioAuto the L and A flags
	// of a prefix information option.
	raOptPrefix, raOptMTU = 3, 5
	raPIOLen, raMTULen    = 32, 8
	pioOnLink, pioAuto    = 0x80, 0x40
	maxRAOptions          = 64
	raICMPOff             = rawlink.EthHeader + rawlink.IPv6Header
	raNextHeaderOff       = rawlink.EthHeader + 6
	rsInterval            = 2 * time.Second // RFC 4861's RTR_SOLICITATION_INTERVAL (4 s) halved: the preflight's budget is 5 s
	maxSolicitations      = 3               // RFC 4861's MAX_RTR_SOLICITATIONS
	raReadPause           = 100 * time.Millisecond
)

// raAllNodes and rsAllRouters are ff02::1 and ff02::2, and their Ethernet
// groups.
var (
	raAllNodes      = netip.AddrFrom16([16]byte{0xff, 0x02, 15: 1})
	rsAllRouters    = netip.AddrFrom16([16]byte{0xff, 0x02, 15: 2})
	raAllNodesMAC   = rawlink.MulticastMAC(raAllNodes)
	rsAllRoutersMAC = rawlink.MulticastMAC(rsAllRouters)
)

// Routers finds the IPv6 routers of parent's LAN: it opens a packet
// socket on parent (in namespace ns; the calling thread's when ns is not
// open) that receives only untagged incoming ICMPv6 Router
// Advertisements, to the all-nodes group or to mac, sends a Router
// Solicitation from mac (IPv6 source ::, to ff02::2, hop limit 255) at
// once and again every 2 s, at most 3 in all, and collects every valid
// Router Advertisement (RFC 4861 section 6.1.2: hop limit 255, a
// link-local source, code 0, a valid checksum, well-formed options)
// until ctx ends. Routers are distinct by source address, each as its
// latest advertisement says, in the order they first advertised.
// Lifetimes of 0xffffffff (infinity) are that many seconds.
//
// The end of ctx is not an error: the routers (none when none
// advertised) are the result. The error says that mac is not an Ethernet
// unicast address, or that the socket could not be opened or a
// solicitation not sent (a missing or down parent); the routers
// collected before a failed solicitation are returned with it.
func Routers(ctx context.Context, ns netns.NsHandle, parent string, mac net.HardwareAddr) ([]Router, error) {
	if len(mac) != 6 || mac[0]&1 == 1 || [6]byte(mac) == [6]byte{} {
		return nil, fmt.Errorf("router solicitation on parent %s: MAC %q is not an Ethernet unicast address: give the parent's MAC or a new locally administered one", parent, mac)
	}
	if ctx.Err() != nil { // nothing could be collected: nothing is sent
		return nil, nil
	}
	l, err := rawlink.Listen(parent, rawlink.Config{Netns: ns, Who: "the LAN check's", Proto: unix.ETH_P_ALL,
		Filter: rawlink.Untagged(raFilter()), For: " for router advertisements",
		Ethernet: "router discovery needs an Ethernet link", Unicast: mac, Groups: []net.HardwareAddr{raAllNodesMAC}})
	if err != nil {
		return nil, err
	}
	return solicitRouters(ctx, l, mac, rsInterval)
}

// solicitRouters sends Router Solicitations from mac on l, the first at once,
// then every interval, at most maxSolicitations, and collects the
// Router Advertisements l receives until ctx ends. It closes l.
func solicitRouters(ctx context.Context, l *rawlink.Link, mac net.HardwareAddr, interval time.Duration) ([]Router, error) {
	in := make(chan Router, 16)
	closed, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, _, err := l.ReadFrom(buf)
			if err != nil {
				// Closed, or e.g. ENETDOWN while the parent is down: wait.
				select {
				case <-closed:
					return
				case <-time.After(raReadPause):
					continue
				}
			}
			r, ok := parseRA(buf[:n])
			if !ok {
				continue
			}
			select {
			case in <- r:
			case <-closed:
				return
			}
		}
	}()
	defer func() {
		close(closed)
		_ = l.Close()
		<-done
	}()

	var routers []Router
	rs := rsFrame(mac)
	if err := l.Send(rs); err != nil {
		return nil, fmt.Errorf("send a router solicitation on parent %s: %w: check that the link is up", l.Parent(), err)
	}
	sent := 1
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return routers, nil
		case <-tick.C:
			if sent >= maxSolicitations {
				tick.Stop()
				continue
			}
			if err := l.Send(rs); err != nil {
				return routers, fmt.Errorf("send router solicitation %d on parent %s: %w: check that the link is up", sent+1, l.Parent(), err)
			}
			sent++
		case r := <-in:
			i := 0
			for i < len(routers) && routers[i].Source != r.Source {
				i++
			}
			if i == len(routers) {
				routers = append(routers, r)
			} else {
				routers[i] = r
			}
		}
	}
}

// rsFrame is a Router Solicitation from mac: from :: (so without a source
// link-layer address option, RFC 4861 section 4.1) to ff02::2 at
// 33:33:00:00:00:02, hop limit 255.
func rsFrame(mac net.HardwareAddr) []byte {
	m := make([]byte, rsLen)
	m[0] = ndpRS
	return rawlink.ICMPv6(mac, rsAllRoutersMAC, netip.IPv6Unspecified(), rsAllRouters, rawlink.NDPHopLimit, m)
}

// parseRA reads a Router Advertisement out of frame f, validated as RFC
// 4861 section 6.1.2 asks (hop limit 255, link-local source, code 0, at
// least 16 bytes, a valid checksum, no option of length 0 or past the
// end); ok is false for anything else. A prefix information option of
// another length than 32 bytes or a prefix length over 128, or an MTU
// option of another length than 8 bytes, is skipped.
func parseRA(f []byte) (r Router, ok bool) {
	p, ok := rawlink.Parse(f)
	if !ok || !p.Src.Is6() || p.Proto != rawlink.ProtoICMPv6 || p.HopLimit != rawlink.NDPHopLimit || !p.Src.IsLinkLocalUnicast() {
		return r, false
	}
	m := p.Payload
	if len(m) < raHeader || m[0] != ndpRA || m[1] != 0 || rawlink.ICMPv6Checksum(p.Src, p.Dst, m) != binary.BigEndian.Uint16(m[2:4]) {
		return r, false
	}
	r = Router{Source: p.Src, MAC: net.HardwareAddr(bytes.Clone(p.SrcMAC)), Managed: m[5]&raManaged != 0, Other: m[5]&raOther != 0,
		Lifetime: time.Duration(binary.BigEndian.Uint16(m[6:8])) * time.Second}
	opts := m[raHeader:]
	for n := 0; len(opts) > 0; n++ {
		if len(opts) < 2 || n >= maxRAOptions {
			return Router{}, false
		}
		size := int(opts[1]) * 8
		if size == 0 || size > len(opts) {
			return Router{}, false
		}
		o := opts[:size]
		switch {
		case o[0] == raOptPrefix && size == raPIOLen && o[2] <= 128:
			r.Prefixes = append(r.Prefixes, RAPrefix{
				Prefix:     netip.PrefixFrom(netip.AddrFrom16([16]byte(o[16:32])), int(o[2])).Masked(),
				OnLink:     o[3]&pioOnLink != 0,
				Autonomous: o[3]&pioAuto != 0,
				Valid:      time.Duration(binary.BigEndian.Uint32(o[4:8])) * time.Second,
				Preferred:  time.Duration(binary.BigEndian.Uint32(o[8:12])) * time.Second,
			})
		case o[0] == raOptMTU && size == raMTULen:
			r.MTU = int(binary.BigEndian.Uint32(o[4:8]))
		}
		opts = opts[size:]
	}
	return r, true
}

// raFilter keeps, of the frames the parent receives (not those it
// sends), IPv6 carrying ICMPv6 Router Advertisements (no extension
// headers); Routers puts rawlink.Untagged before it.
func raFilter() []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 6},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.EtherIPv6, SkipTrue: 4},
		bpf.LoadAbsolute{Off: raNextHeaderOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: rawlink.ProtoICMPv6, SkipTrue: 2},
		bpf.LoadAbsolute{Off: raICMPOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ndpRA, SkipFalse: 1},
		bpf.RetConstant{Val: 0x40000},
		bpf.RetConstant{Val: 0},
	}
}
