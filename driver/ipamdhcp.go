package driver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Networks on a DHCP pool of underlay's IPAM (--ipam-opt dhcp=true,
// record.DHCPConfig.FromIPAM; the IPAM's side is ipam/dhcp.go): the IPAM
// leased each endpoint's address with the MAC of its name before
// CreateEndpoint. The endpoint gets that MAC (one given is refused unless
// it is that one), takes the lease over into its record (the lifecycle
// of driver/internal/leases renews it and releases it at DeleteEndpoint),
// and the IPAM's record of the lease says so.

// fromDHCPPool says whether the network's IPv4 pool is one of the IPAM's
// DHCP pools (its address space and prefix), refusing what such a network
// cannot be.
func (d *Driver) fromDHCPPool(want record.Network, req *network.CreateNetworkRequest) (bool, error) {
	if len(req.IPv4Data) == 0 || req.IPv4Data[0] == nil {
		return false, nil
	}
	pools, err := d.dhcpPools(req.IPv4Data[0].AddressSpace, req.IPv4Data[0].Pool)
	if err != nil || len(pools) == 0 {
		return false, err
	}
	if want.Type == kernel.KindIpvlan {
		return false, config.Invalidf("network %s: --ipam-opt dhcp=true gives each container the MAC of its name, and ipvlan endpoints share the MAC of their parent: use -o type=macvlan, or ipvlan with -o dhcp=true and --ipam-driver null", dockerid.Short(want.ID))
	}
	return true, nil
}

// dhcpPoolOnParent refuses a network on a DHCP pool of another parent
// than the network's (resolved) one: the leases would be of another LAN.
func (d *Driver) dhcpPoolOnParent(want record.Network) error {
	if !want.Config.DHCP.FromIPAM || len(want.IPv4) == 0 {
		return nil
	}
	pools, err := d.dhcpPools("", want.IPv4[0].Subnet)
	if err != nil {
		return err
	}
	var others []string
	for _, p := range pools {
		if p.Parent == want.Parent {
			return nil
		}
		others = append(others, p.Parent)
	}
	return config.Invalidf("network %s: its DHCP pool %s leases on --ipam-opt parent=%s, and the network's parent is %s: give -o parent and --ipam-opt parent the same interface", dockerid.Short(want.ID), want.IPv4[0].Subnet, strings.Join(others, ","), want.Parent)
}

// dhcpPools are the IPAM's DHCP pools of prefix (in space; any when "").
func (d *Driver) dhcpPools(space, prefix string) ([]store.IPAMPool, error) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return nil, nil
	}
	var out []store.IPAMPool
	err = d.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, ip := range pools {
			if ip.DHCP && ip.Prefix == p.Masked().String() && (space == "" || ip.Space == space) {
				out = append(out, ip)
			}
		}
		return err
	})
	return out, err
}

// ipamLease is the IPAM's lease of an endpoint's IPv4 address on n, with
// the ID of its pool.
func (d *Driver) ipamLease(n record.Network, addr string) (string, store.IPAMLease, error) {
	a, err := netip.ParsePrefix(addr)
	missing := fmt.Errorf("%w: network %s takes its addresses from underlay's IPAM over DHCP, and the IPAM holds no lease of address %q on %s: create the container again (its address must come from the IPAM)", pluginapi.ErrNotFound, dockerid.Short(n.ID), addr, n.Parent)
	if err != nil || len(n.IPv4) == 0 {
		return "", store.IPAMLease{}, missing
	}
	var id string
	var l store.IPAMLease
	err = d.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, p := range pools {
			if !p.DHCP || p.Parent != n.Parent {
				continue
			}
			if pl, perr := netip.ParsePrefix(p.Prefix); perr != nil || !pl.Contains(a.Addr()) {
				continue
			}
			got, ok, lerr := tx.IPAMLease(p.ID, a.Addr().String())
			if lerr != nil {
				return lerr
			}
			if ok {
				id, l = p.ID, got
				return nil
			}
		}
		if err == nil {
			err = missing
		}
		return err
	})
	return id, l, err
}

// leaseMAC is the MAC of an endpoint on a DHCP pool: its lease's. A MAC
// Docker gives (--mac-address) must be that one.
func (d *Driver) leaseMAC(n record.Network, ep record.Endpoint, given string) (string, error) {
	if ep.IPv4 == "" {
		return "", nil
	}
	_, l, err := d.ipamLease(n, ep.IPv4)
	if err != nil {
		return "", err
	}
	if given != "" && !strings.EqualFold(given, l.MAC) {
		who := "this container's name"
		if l.Name != "" {
			who = fmt.Sprintf("name %q", l.Name)
		}
		return "", config.Invalidf("endpoint %s asks for MAC %s, but network %s leases each address from the LAN's DHCP server with the MAC of the container's name: %s has %s (underlay mac --parent %s %s prints it): drop --mac-address (mac_address), or reserve the address for %s on the DHCP server",
			dockerid.Short(ep.ID), given, dockerid.Short(n.ID), who, l.MAC, n.Parent, l.Name, l.MAC)
	}
	return l.MAC, nil
}

// adoptLease is the address source of networks on a DHCP pool: the
// endpoint takes the IPAM's lease of its address over (renewed from now
// on by the driver), and the IPAM's record says so in the endpoint's
// commit. When Docker asks again for an endpoint that holds it, the
// endpoint keeps its lease as renewed since.
func (d *Driver) adoptLease(_ context.Context, n record.Network, ep, existing *record.Endpoint) (grant, error) {
	if ep.IPv4 == "" {
		return grant{}, nil
	}
	poolID, l, err := d.ipamLease(n, ep.IPv4)
	if err != nil {
		return grant{}, err
	}
	lease := l.Lease
	lease.Hostname = l.Hostname
	if existing != nil && existing.Lease != nil && existing.IPv4 == ep.IPv4 && existing.MAC == ep.MAC {
		lease = *existing.Lease
	}
	ep.Lease = &lease
	p, err := netip.ParsePrefix(ep.IPv4)
	if err != nil {
		return grant{}, err // ipamLease parsed it
	}
	addr := p.Addr().String()
	return grant{
		commit: func(tx *store.Tx) error {
			l.NetworkID, l.EndpointID = n.ID, ep.ID
			return tx.PutIPAMLease(poolID, addr, l)
		},
		start: func() { d.leases.V4.Schedule(n, *ep) },
	}, nil
}
