package config

import (
	"net/netip"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/netaddr"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// parseHostAddress validates host_address against the network's mode and
// IPv4 pools; "" when it is not given.
func parseHostAddress(o netOptions, v4 []record.Pool, data []*network.IPAMData) (string, error) {
	v, ok := o.Given[OptHostAddress]
	if !ok || v == "" {
		return "", nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is4() {
		return "", Invalidf("host_address %q is not an IPv4 address: give the host's address on the network, such as 198.18.1.2", v)
	}
	switch {
	case len(v4) == 0:
		return "", Invalidf("host_address=%s needs an IPv4 subnet, and this network has none (IPv6 only, --ipv4=false): host_address6 is not supported yet; drop host_address, or give the network an IPv4 --subnet", a)
	case o.Parent == "":
		return "", Invalidf("host_address=%s needs a parent: an internal network has no wire for the host to join", a)
	case o.Type == kernel.KindMacvlan && o.Mode != kernel.MacvlanBridge:
		return "", Invalidf("host_address=%s needs macvlan_mode=bridge: in %s mode the kernel passes no traffic between the host's link and the containers' on one parent", a, o.Mode)
	case o.Type == kernel.KindIpvlan && o.Flag != kernel.IpvlanFlagBridge:
		return "", Invalidf("host_address=%s needs ipvlan_flag=bridge: with %s the kernel passes no traffic between the host's link and the containers' on one parent", a, o.Flag)
	}
	for i, p := range v4 {
		sub, err := netip.ParsePrefix(p.Subnet)
		if err != nil || !sub.Contains(a) {
			continue
		}
		if p.Gateway == a.String() {
			return "", Invalidf("host_address=%s is the gateway of %s: give the host another address of the subnet, reserved with --aux-address host=ADDR", a, sub)
		}
		if i < len(data) && data[i] != nil && auxHas(data[i].AuxAddresses, a) {
			return a.String(), nil
		}
		return "", Invalidf("host_address=%s is not reserved from Docker's IPAM, which would hand it to a container: add --aux-address host=%s to docker network create", a, a)
	}
	return "", Invalidf("host_address=%s is in none of the network's IPv4 subnets: give an address of the --subnet, reserved with --aux-address host=ADDR", a)
}

// auxHas reports whether the aux addresses reserve a.
func auxHas(aux map[string]any, a netip.Addr) bool {
	for _, v := range aux {
		if s, ok := v.(string); ok {
			if b, err := netaddr.Parse(s); err == nil && b == a {
				return true
			}
		}
	}
	return false
}
