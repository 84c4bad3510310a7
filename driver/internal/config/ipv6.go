package config

import (
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// IPv6 from the LAN (-o ipv6_mode): static (Docker's IPAM gives the
// address, today's behaviour), slaac (the container's interface takes
// the LAN's router advertisements and forms its own addresses) or dhcpv6
// (underlay leases an address per endpoint from the LAN's DHCPv6 server).
const OptIPv6Mode = "ipv6_mode"

// IPv6 modes, as -o ipv6_mode names them.
const (
	IPv6Static = "static"
	IPv6SLAAC  = "slaac"
	IPv6DHCPv6 = "dhcpv6"
)

// IPv6Modes lists the valid ipv6_mode values, the default first.
var IPv6Modes = []string{IPv6Static, IPv6SLAAC, IPv6DHCPv6}

// NullPool6 reports whether IPv6 data is Docker's null IPAM's: one pool
// ::/0 in the address space "null".
func NullPool6(data []*network.IPAMData) bool {
	return len(data) == 1 && data[0] != nil && data[0].AddressSpace == "null" && data[0].Pool == "::/0"
}

// CheckIPv6Mode refuses what a network of the mode cannot be. The LAN
// modes take IPv6 with Docker's null IPAM (--ipv6 --ipam-driver null);
// slaac also with Docker's IPAM (IPv4 from its pools, and an IPv6 pool
// whose address each container keeps beside the ones it forms from the
// LAN's advertisements: the engines give every endpoint of an IPv6 pool
// an address and let no driver replace it, so dhcpv6 cannot); and both
// on an IPv4 network of Docker's IPAM without --ipv6, on engines that keep
// IPv6 on an interface given an IPv6 address (current ones: those that
// send com.docker.network.enable_ipv4), the address being the driver's.
func CheckIPv6Mode(mode string, req *network.CreateNetworkRequest, o netOptions, internal bool) error {
	if mode == IPv6Static {
		return nil
	}
	dockerPools := len(req.IPv6Data) > 0 && !NullPool6(req.IPv6Data)
	v4Docker := len(req.IPv4Data) > 0 && !nullPool(req.IPv4Data)
	_, currentEngine := req.Options[LabelEnableIPv4]
	switch {
	case len(req.IPv6Data) == 0 && v4Docker && !currentEngine:
		return Invalidf("ipv6_mode=%s on a network without --ipv6 (IPv4 from Docker's IPAM, pool %s) needs an engine that keeps IPv6 on an interface the driver gives an IPv6 address (one that sends com.docker.network.enable_ipv4, Docker 28 or later); this one disables IPv6 in the container: create the network with --ipv6 --subnet V4 --subnet V6 -o ipv6_mode=slaac, or with --ipv6 --ipam-driver null", mode, req.IPv4Data[0].Pool)
	case len(req.IPv6Data) == 0 && !v4Docker:
		return Invalidf("ipv6_mode=%s takes IPv6 from the LAN, but the network has no IPv6: create it with --ipv6 --ipam-driver null", mode)
	case dockerPools && mode == IPv6DHCPv6:
		pool := "none"
		if req.IPv6Data[0] != nil {
			pool = req.IPv6Data[0].Pool
		}
		return Invalidf("ipv6_mode=dhcpv6 leases each container's IPv6 address from the LAN, but Docker's IPAM gave the network the IPv6 pool %s, and Docker gives every container an address of it that no driver may replace: create it with --ipv6 --ipam-driver null (and no --subnet; IPv4 then comes from -o dhcp=true, or there is none), or use ipv6_mode=slaac with Docker's IPAM", pool)
	case dockerPools && o.Config.DHCP.On:
		return Invalidf("ipv6_mode=%s with Docker's IPAM pools cannot take IPv4 from -o dhcp=true (DHCP needs --ipam-driver null): drop dhcp=true, or create the network with --ipv6 --ipam-driver null", mode)
	case len(req.IPv6Data) > 0 && !dockerPools && v4Docker:
		return Invalidf("ipv6_mode=%s needs Docker's null IPAM, but the network has the IPv4 pool %s: create it with --ipam-driver null (IPv4 from -o dhcp=true, or --ipv4=false)", mode, req.IPv4Data[0].Pool)
	case internal || o.Parent == "":
		return Invalidf("ipv6_mode=%s needs a parent on the LAN with the router (and DHCPv6 server): give -o parent=IFACE, and do not make the network --internal", mode)
	case o.Type == kernel.KindIpvlan && o.Mode != "l2":
		return Invalidf("ipv6_mode=%s needs ipvlan_mode=l2: in %s mode the LAN's router advertisements and DHCPv6 server do not reach the containers", mode, o.Mode)
	case mode == IPv6SLAAC && o.Type == kernel.KindIpvlan:
		return Invalidf("ipv6_mode=slaac is not supported on ipvlan networks yet (their endpoints share the parent's MAC, so underlay cannot tell Docker the link-local address the kernel will form): use type=macvlan, or ipv6_mode=dhcpv6")
	case o.Given[OptHostAddress] != "":
		return Invalidf("host_address is not supported on ipv6_mode=%s networks: drop host_address, or use ipv6_mode=static", mode)
	}
	return nil
}

// Leases6 says the network's endpoints hold DHCPv6 leases the driver
// renews: its own (ipv6_mode=dhcpv6) or the IPAM's (a DHCPv6 pool).
func Leases6(c record.NetworkConfig) bool {
	return c.IPv6Mode == IPv6DHCPv6 || c.DHCP.FromIPAM6
}
