package plan

import (
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// SLAACAddress is what CreateEndpoint answers as the IPv6 address of an
// endpoint of an ipv6_mode=slaac network: its link-local address (EUI-64
// from its MAC, as the kernel forms it), /64. An endpoint with an IPv6
// address is one whose interface the engines leave IPv6 on (the current
// engine disables IPv6 on an interface given none); its global addresses
// and default route then come from the LAN's router advertisements.
func SLAACAddress(mac net.HardwareAddr) (string, bool) {
	if len(mac) != 6 {
		return "", false
	}
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.PrefixFrom(netip.AddrFrom16(b), 64).String(), true
}

// EndpointAddrs are the addresses an endpoint's record holds: its IPv4
// and IPv6 addresses (static, or leased), without their prefix lengths.
func EndpointAddrs(ep record.Endpoint) []netip.Addr {
	var out []netip.Addr
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(a); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

const (

	// maxDeclines bounds the offers a CreateEndpoint declines.
	MaxDeclines = 3
)

// Announcing says whether and how a joined endpoint is announced by
// underlay: not where the engine does, not on internal networks nor
// ipvlan l3/l3s, not when the network asks for none.
func Announcing(n record.Network) (record.Announce, bool) {
	c := n.Config.Announce
	if n.EngineAnnounces || n.Internal || c.Count == 0 || (n.Type == kernel.KindIpvlan && n.Mode != kernel.IpvlanL2) {
		return c, false
	}
	return c, true
}
