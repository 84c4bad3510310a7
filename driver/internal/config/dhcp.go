package config

import (
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Driver options of DHCP networks.
const (
	OptDHCP        = "dhcp"
	OptDHCPTimeout = "dhcp_timeout"
)

// DefaultDHCPTimeout is how long CreateEndpoint waits for a lease;
// maxDHCPTimeout stays under the 30 s dockerd waits for a plugin's answer
// (the managed plugin's default `docker plugin enable --timeout`).
const (
	DefaultDHCPTimeout = 10 * time.Second
	minDHCPTimeout     = time.Second
	maxDHCPTimeout     = 25 * time.Second
)

// nullPool reports whether IPv4 data is Docker's null IPAM's: one pool
// 0.0.0.0/0 in the address space "null".
func nullPool(data []*network.IPAMData) bool {
	return len(data) == 1 && data[0] != nil && data[0].AddressSpace == "null" && data[0].Pool == "0.0.0.0/0"
}

// CheckDHCPNetwork refuses what a DHCP network cannot be.
func CheckDHCPNetwork(c record.DHCPConfig, req *network.CreateNetworkRequest, o netOptions, internal bool) error {
	switch {
	case !c.On:
		return nil
	case !nullPool(req.IPv4Data):
		pool := "none"
		if len(req.IPv4Data) > 0 && req.IPv4Data[0] != nil {
			pool = req.IPv4Data[0].Pool
		}
		return Invalidf("dhcp=true takes the addresses from the LAN's DHCP server, but Docker's IPAM gave the network pool %s: create it with --ipam-driver null (and no --subnet)", pool)
	case len(req.IPv6Data) > 0 && o.Config.IPv6Mode == IPv6Static:
		return Invalidf("dhcp=true leases IPv4 addresses only: drop --ipv6, or take IPv6 from the LAN too with -o ipv6_mode=slaac or -o ipv6_mode=dhcpv6")
	case o.Type == kernel.KindIpvlan && o.Mode != "l2":
		return Invalidf("dhcp=true needs ipvlan_mode=l2: in %s mode the host routes for the containers, and the LAN's DHCP server and router do not see them", o.Mode)
	case internal || o.Parent == "":
		return Invalidf("dhcp=true needs a parent on the LAN with the DHCP server: give -o parent=IFACE, and do not make the network --internal")
	case o.Given[OptHostAddress] != "":
		return Invalidf("host_address needs the network's subnet, which a dhcp=true network learns only per lease: drop host_address")
	}
	return nil
}
