package config

import (
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
)

// lan6Net is a CreateNetwork request as the current engine sends it for
// `docker network create --ipv6 --ipam-driver null -o parent=eth0 …`
// with the driver options kv.
func lan6Net(kv ...string) *network.CreateNetworkRequest {
	opts := map[string]any{"parent": "eth0"}
	for i := 0; i+1 < len(kv); i += 2 {
		opts[kv[i]] = kv[i+1]
	}
	return &network.CreateNetworkRequest{
		NetworkID: "6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a",
		Options:   map[string]any{LabelGeneric: opts, labelEnableIPv6: true},
		IPv4Data:  []*network.IPAMData{{AddressSpace: "null", Pool: "0.0.0.0/0"}},
		IPv6Data:  []*network.IPAMData{{AddressSpace: "null", Pool: "::/0"}},
	}
}

func TestIPv6Modes(t *testing.T) {
	v6only := func(r *network.CreateNetworkRequest) *network.CreateNetworkRequest { r.IPv4Data = nil; return r }
	static6 := func(r *network.CreateNetworkRequest) *network.CreateNetworkRequest {
		r.IPv6Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "2001:db8:6::/64", Gateway: "2001:db8:6::1"}}
		return r
	}
	v4Only := func(r *network.CreateNetworkRequest) *network.CreateNetworkRequest {
		r.IPv6Data = nil
		delete(r.Options, labelEnableIPv6)
		return r
	}
	current := func(r *network.CreateNetworkRequest) *network.CreateNetworkRequest {
		r.Options[LabelEnableIPv4] = true
		return r
	}
	dockerIPAM := func(r *network.CreateNetworkRequest) *network.CreateNetworkRequest {
		r.IPv4Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "198.18.6.0/24", Gateway: "198.18.6.1/24"}}
		return r
	}
	for _, tc := range []struct {
		name    string
		req     *network.CreateNetworkRequest
		mode    string
		dhcp    bool
		v4, v6  int // pools kept in the record
		errSubs []string
	}{
		{name: "slaac with DHCPv4", req: lan6Net("dhcp", "true", "ipv6_mode", "slaac"), mode: IPv6SLAAC, dhcp: true},
		{name: "dhcpv6 with DHCPv4", req: lan6Net("dhcp", "true", "ipv6_mode", "dhcpv6"), mode: IPv6DHCPv6, dhcp: true},
		{name: "slaac without IPv4 (null IPAM)", req: lan6Net("ipv6_mode", "slaac"), mode: IPv6SLAAC},
		{name: "dhcpv6 IPv6-only (--ipv4=false)", req: v6only(lan6Net("ipv6_mode", "dhcpv6")), mode: IPv6DHCPv6},
		{name: "dhcpv6 on ipvlan l2", req: lan6Net("ipv6_mode", "dhcpv6", "type", "ipvlan"), mode: IPv6DHCPv6},
		{name: "dhcp_timeout on a dhcpv6-only network", req: lan6Net("ipv6_mode", "dhcpv6", "dhcp_timeout", "5s"), mode: IPv6DHCPv6},
		{name: "dhcp_timeout on a slaac-only network", req: lan6Net("ipv6_mode", "slaac", "dhcp_timeout", "5s"), errSubs: []string{"dhcp_timeout=5s", "dhcp=true", "ipv6_mode=dhcpv6"}},
		{name: "static is the default", req: static6(lan6Net("dhcp", "false")), mode: IPv6Static, v4: 1, v6: 1},
		{name: "empty is static", req: static6(lan6Net("ipv6_mode", "")), mode: IPv6Static, v4: 1, v6: 1},
		{name: "bad value", req: lan6Net("ipv6_mode", "ra"), errSubs: []string{`ipv6_mode "ra"`, "static, slaac, dhcpv6"}},
		{name: "DHCPv4 with --ipv6 and no mode", req: lan6Net("dhcp", "true"), errSubs: []string{"IPv4 addresses only", "ipv6_mode=slaac"}},
		{name: "no --ipv6", req: func() *network.CreateNetworkRequest { r := lan6Net("ipv6_mode", "slaac"); r.IPv6Data = nil; return r }(),
			errSubs: []string{"ipv6_mode=slaac", "no IPv6", "--ipv6 --ipam-driver null"}},
		{name: "dhcpv6 on an IPv4 network of Docker's IPAM, current engine", req: current(v4Only(dockerIPAM(lan6Net("ipv6_mode", "dhcpv6")))), mode: IPv6DHCPv6, v4: 1},
		{name: "slaac on an IPv4 network of Docker's IPAM, current engine", req: current(v4Only(dockerIPAM(lan6Net("ipv6_mode", "slaac")))), mode: IPv6SLAAC, v4: 1},
		{name: "dhcpv6 on an IPv4 network of Docker's IPAM, 20.10", req: v4Only(dockerIPAM(lan6Net("ipv6_mode", "dhcpv6"))),
			errSubs: []string{"ipv6_mode=dhcpv6", "without --ipv6", "198.18.6.0/24", "com.docker.network.enable_ipv4", "--ipv6 --subnet V4 --subnet V6 -o ipv6_mode=slaac"}},
		{name: "static IPv6 pool", req: static6(lan6Net("ipv6_mode", "dhcpv6")), errSubs: []string{"2001:db8:6::/64", "--ipv6 --ipam-driver null"}},
		{name: "IPv4 from Docker's IPAM, IPv6 from the null IPAM", req: func() *network.CreateNetworkRequest {
			r := lan6Net("ipv6_mode", "slaac")
			r.IPv4Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "198.18.6.0/24"}}
			return r
		}(), errSubs: []string{"198.18.6.0/24", "--ipam-driver null"}},
		{name: "slaac with Docker's IPAM (both families)", req: dockerIPAM(static6(lan6Net("ipv6_mode", "slaac"))), mode: IPv6SLAAC, v4: 1, v6: 1},
		{name: "slaac with Docker's IPAM, IPv6 only", req: v6only(static6(lan6Net("ipv6_mode", "slaac"))), mode: IPv6SLAAC, v6: 1},
		{name: "dhcpv6 with Docker's IPAM", req: dockerIPAM(static6(lan6Net("ipv6_mode", "dhcpv6"))),
			errSubs: []string{"ipv6_mode=dhcpv6", "2001:db8:6::/64", "no driver may replace", "--ipv6 --ipam-driver null", "ipv6_mode=slaac with Docker's IPAM"}},
		{name: "slaac with Docker's IPAM and dhcp=true", req: dockerIPAM(static6(lan6Net("ipv6_mode", "slaac", "dhcp", "true"))),
			errSubs: []string{"dhcp=true"}},
		{name: "host_address on a slaac network", req: dockerIPAM(static6(lan6Net("ipv6_mode", "slaac", "host_address", "198.18.6.250/24"))),
			errSubs: []string{"host_address", "ipv6_mode=slaac", "ipv6_mode=static"}},
		{name: "internal", req: func() *network.CreateNetworkRequest {
			r := lan6Net("ipv6_mode", "slaac")
			r.Options[LabelInternal] = true
			return r
		}(), errSubs: []string{"ipv6_mode=slaac", "--internal"}},
		{name: "ipvlan l3", req: lan6Net("ipv6_mode", "dhcpv6", "ipvlan_mode", "l3"), errSubs: []string{"ipvlan_mode=l2", "l3"}},
		{name: "slaac on ipvlan", req: lan6Net("ipv6_mode", "slaac", "type", "ipvlan"), errSubs: []string{"ipv6_mode=slaac", "type=macvlan", "dhcpv6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseNetwork(tc.req)
			if tc.errSubs != nil {
				drivertest.WantErr(t, err, pluginapi.ErrInvalid, tc.errSubs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Config.IPv6Mode; got != tc.mode {
				t.Errorf("mode %q, want %q", got, tc.mode)
			}
			if n.Config.DHCP.On != tc.dhcp {
				t.Errorf("dhcp %v, want %v", n.Config.DHCP.On, tc.dhcp)
			}
			if len(n.IPv4) != tc.v4 || len(n.IPv6) != tc.v6 {
				t.Errorf("record has IPv4 pools %v and IPv6 pools %v, want %d and %d", n.IPv4, n.IPv6, tc.v4, tc.v6)
			}
		})
	}
}
