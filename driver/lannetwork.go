package driver

import (
	"fmt"
	"maps"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/store/record"
)

// LANNetwork is what the LAN preflight needs to know of a network.
func LANNetwork(n record.Network) lancheck.Network {
	out := lancheck.Network{
		Parent: n.Parent, Type: n.Type, Mode: n.Mode, MTU: n.MTU,
		DHCP:          n.Config.DHCP.On || n.Config.DHCP.FromIPAM,
		IPv6Mode:      n.Config.IPv6Mode,
		AllowWireless: n.Config.AllowWireless,
	}
	if n.Config.DHCP.FromIPAM6 {
		out.IPv6Mode = config.IPv6DHCPv6
	}
	if len(n.IPv6) == 0 && out.IPv6Mode == config.IPv6Static {
		out.IPv6Mode = "" // a network without IPv6 wants nothing from the LAN's routers
	}
	for _, p := range n.IPv4 {
		if g, err := netip.ParseAddr(p.Gateway); err == nil && !out.Gateway4.IsValid() {
			out.Gateway4 = g
		}
	}
	for _, p := range n.IPv6 {
		if g, err := netip.ParseAddr(p.Gateway); err == nil && !out.Gateway6.IsValid() {
			out.Gateway6 = g
		}
	}
	if n.Internal {
		out.Gateway4, out.Gateway6 = netip.Addr{}, netip.Addr{}
	}
	return out
}

// LANOptions is what the LAN preflight needs to know of a network that
// `docker network create -d underlay -o parent=PARENT -o KEY=VALUE...`
// would make, parsed with the driver's option table (without the kernel):
// `underlay doctor --lan PARENT -o KEY=VALUE...`. parent is the link as
// given (a VLAN as eth0.10); an -o parent other than it is refused.
func LANOptions(parent string, opts map[string]string) (lancheck.Network, error) {
	given := maps.Clone(opts)
	if given == nil {
		given = map[string]string{}
	}
	if p, ok := given[config.OptParent]; ok && p != parent {
		return lancheck.Network{}, fmt.Errorf("-o parent=%s is not the parent %s the LAN checks run on: drop -o parent, or give %s as PARENT", p, parent, p)
	}
	given[config.OptParent] = parent
	o, err := config.ParseOptions(given)
	if err != nil {
		return lancheck.Network{}, err
	}
	n := record.Network{Parent: parent, Type: o.Type, Mode: o.Mode, MTU: o.MTU, Config: o.Config}
	out := LANNetwork(n)
	if out.IPv6Mode == config.IPv6Static {
		out.IPv6Mode = "" // -o says nothing of whether the network will have IPv6
	}
	return out, nil
}
