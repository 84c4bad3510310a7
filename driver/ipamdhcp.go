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

// Networks on DHCP pools of underlay's IPAM (--ipam-opt dhcp=true for
// IPv4, dhcpv6=true for IPv6; record.DHCPConfig.FromIPAM and FromIPAM6;
// the IPAM's side is ipam/dhcp.go): the IPAM leased each endpoint's
// address with the MAC of its name before CreateEndpoint. The endpoint
// gets that MAC (one given is refused unless it is that one), takes the
// leases over into its record (the lifecycle of driver/internal/leases
// renews them and releases them at DeleteEndpoint), and the IPAM's
// records of the leases say so.

// fromDHCPPools says whether the network's IPv4 and IPv6 pools may be
// DHCP pools of the IPAM (by address space and prefix: libnetwork does
// not tell the pool's ID; settleDHCPPools decides by the parent once it
// is resolved, and refuses what such a network cannot be).
func (d *Driver) fromDHCPPools(want record.Network, req *network.CreateNetworkRequest) (v4, v6 bool, err error) {
	first := func(data []*network.IPAMData) (bool, error) {
		if len(data) == 0 || data[0] == nil {
			return false, nil
		}
		pools, err := d.ipamPools(data[0].AddressSpace, data[0].Pool)
		for _, p := range pools {
			if p.DHCP {
				return true, err
			}
		}
		return false, err
	}
	if v4, err = first(req.IPv4Data); err != nil {
		return false, false, err
	}
	if v6, err = first(req.IPv6Data); err != nil {
		return false, false, err
	}
	return v4, v6, nil
}

// settleDHCPPools decides, once the parent is resolved, whether the
// network is on a DHCP pool of its prefix: one whose parent is the
// network's. A pool of the prefix that is not DHCP on that parent (two
// LANs with one subnet) is the network's instead; only DHCP pools of
// other parents is a mismatch, refused.
func (d *Driver) settleDHCPPools(want *record.Network, refs []config.IPAMRef) error {
	for _, fam := range []struct {
		on    *bool
		pools []record.Pool
	}{{&want.Config.DHCP.FromIPAM, want.IPv4}, {&want.Config.DHCP.FromIPAM6, want.IPv6}} {
		if !*fam.on || len(fam.pools) == 0 {
			continue
		}
		pools, err := d.ipamPools(spaceOf(refs, fam.pools[0].Subnet), fam.pools[0].Subnet)
		if err != nil {
			return err
		}
		var others []string
		onParent := false
		for _, p := range pools {
			switch {
			case p.Parent == want.Parent && p.DHCP:
				onParent = true
			case p.Parent == want.Parent || p.Parent == "":
				*fam.on = false // this LAN's own pool of the subnet
			case p.DHCP:
				others = append(others, p.Parent)
			}
		}
		if onParent {
			*fam.on = true
			continue
		}
		if *fam.on {
			return config.Invalidf("network %s: its DHCP pool %s leases on --ipam-opt parent=%s, and the network's parent is %s: give -o parent and --ipam-opt parent the same interface", dockerid.Short(want.ID), fam.pools[0].Subnet, strings.Join(others, ","), want.Parent)
		}
	}
	if (want.Config.DHCP.FromIPAM || want.Config.DHCP.FromIPAM6) && want.Type == kernel.KindIpvlan {
		return config.Invalidf("network %s: --ipam-opt dhcp=true (dhcpv6=true) gives each container the MAC of its name, and ipvlan endpoints share the MAC of their parent: use -o type=macvlan, or ipvlan with -o dhcp=true (-o ipv6_mode=dhcpv6) and --ipam-driver null", dockerid.Short(want.ID))
	}
	return nil
}

// spaceOf is the address space of the request's pool of subnet.
func spaceOf(refs []config.IPAMRef, subnet string) string {
	for _, r := range refs {
		if r.Pool == subnet {
			return r.Space
		}
	}
	return ""
}

// ipamPools are the IPAM's pools of prefix (in space; any when "").
func (d *Driver) ipamPools(space, prefix string) ([]store.IPAMPool, error) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return nil, nil
	}
	var out []store.IPAMPool
	err = d.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, ip := range pools {
			if ip.Prefix == p.Masked().String() && (space == "" || ip.Space == space) {
				out = append(out, ip)
			}
		}
		return err
	})
	return out, err
}

// ipamLease is the IPAM's lease of an endpoint's address (either family)
// on n, with the ID of its pool and the address without its length.
func (d *Driver) ipamLease(n record.Network, addr string) (string, netip.Addr, store.IPAMLease, error) {
	a, perr := netip.ParsePrefix(addr)
	var id string
	var l store.IPAMLease
	var found bool
	err := d.store.View(func(tx *store.Tx) error {
		if perr != nil {
			return nil
		}
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
				id, l, found = p.ID, got, true
				return nil
			}
		}
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: network %s takes its addresses from underlay's IPAM over DHCP (DHCPv6), and the IPAM holds no lease of address %q on %s: create the container again (its address must come from the IPAM)", pluginapi.ErrNotFound, dockerid.Short(n.ID), addr, n.Parent)
	}
	return id, a.Addr(), l, err
}

// ipamAddrs are the endpoint's addresses the IPAM leased: the IPv4 one
// on a DHCP pool, the IPv6 one on a DHCPv6 pool.
func ipamAddrs(n record.Network, ep record.Endpoint) []string {
	var out []string
	if n.Config.DHCP.FromIPAM && ep.IPv4 != "" {
		out = append(out, ep.IPv4)
	}
	if n.Config.DHCP.FromIPAM6 && ep.IPv6 != "" {
		out = append(out, ep.IPv6)
	}
	return out
}

// leaseMAC is the MAC of an endpoint on DHCP pools: its leases' (one
// MAC: both families' leases are of the name's). A MAC Docker gives
// (--mac-address) must be that one.
func (d *Driver) leaseMAC(n record.Network, ep record.Endpoint, given string) (string, error) {
	var mac, name, first string
	for _, addr := range ipamAddrs(n, ep) {
		_, _, l, err := d.ipamLease(n, addr)
		if err != nil {
			return "", err
		}
		if mac != "" && !strings.EqualFold(mac, l.MAC) {
			return "", config.Invalidf("endpoint %s: the IPAM leased %s with MAC %s and %s with MAC %s, and an endpoint has one MAC: the engine sent no container name (each lease then has a random MAC): use an engine that sends it (moby v2), or take one family from DHCP", dockerid.Short(ep.ID), first, mac, addr, l.MAC)
		}
		mac, name, first = l.MAC, l.Name, addr
	}
	if given != "" && mac != "" && !strings.EqualFold(given, mac) {
		if name == "" {
			return "", config.Invalidf("endpoint %s asks for MAC %s, but network %s leases each address from the LAN's DHCP server, and its lease has MAC %s (random: the engine sent no container name): drop --mac-address (mac_address)",
				dockerid.Short(ep.ID), given, dockerid.Short(n.ID), mac)
		}
		return "", config.Invalidf("endpoint %s asks for MAC %s, but network %s leases each address from the LAN's DHCP server with the MAC of the container's name: name %q has %s (underlay mac --parent %s %s prints it): drop --mac-address (mac_address), or reserve the address for %s on the DHCP server",
			dockerid.Short(ep.ID), given, dockerid.Short(n.ID), name, mac, n.Parent, name, mac)
	}
	return mac, nil
}

// ipamLeases is the address source of networks on DHCP pools: the
// endpoint takes the IPAM's leases of its addresses over (renewed from
// now on by the driver), and the IPAM's records say so in the endpoint's
// commit. When Docker asks again for an endpoint that holds them, the
// endpoint keeps its leases as renewed since.
func (d *Driver) ipamLeases(_ context.Context, n record.Network, ep, existing *record.Endpoint) (grant, error) {
	type taken struct {
		pool, addr string
		l          store.IPAMLease
	}
	var ts []taken
	for _, addr := range ipamAddrs(n, *ep) {
		pool, a, l, err := d.ipamLease(n, addr)
		if err != nil {
			return grant{}, err
		}
		if err := d.leaseFree(l, ep.ID, addr); err != nil {
			return grant{}, err
		}
		again := existing != nil && existing.MAC == ep.MAC
		switch {
		case l.Lease != nil && again && existing.Lease != nil && existing.IPv4 == addr:
			ep.Lease = existing.Lease
		case l.Lease != nil:
			lease := *l.Lease
			ep.Lease = &lease
		case l.Lease6 != nil && again && existing.Lease6 != nil && existing.IPv6 == addr:
			ep.Lease6 = existing.Lease6
		case l.Lease6 != nil:
			lease := *l.Lease6
			ep.Lease6 = &lease
		}
		ts = append(ts, taken{pool, a.String(), l})
	}
	if len(ts) == 0 {
		return grant{}, nil
	}
	return grant{
		commit: func(tx *store.Tx) error {
			for _, t := range ts {
				t.l.NetworkID, t.l.EndpointID = n.ID, ep.ID
				if err := tx.PutIPAMLease(t.pool, t.addr, t.l); err != nil {
					return err
				}
			}
			return nil
		},
		start: func() {
			d.leases.V4.Schedule(n, *ep)
			d.leases.V6.Schedule(n, *ep)
		},
	}, nil
}

// leaseFree refuses a lease another live endpoint took over (Docker gave
// its address to a second endpoint).
func (d *Driver) leaseFree(l store.IPAMLease, epID, addr string) error {
	if l.EndpointID == "" || l.EndpointID == epID {
		return nil
	}
	var live bool
	if err := d.store.View(func(tx *store.Tx) (err error) {
		_, live, err = tx.Endpoint(l.NetworkID, l.EndpointID)
		return err
	}); err != nil || !live {
		return err
	}
	return fmt.Errorf("%w: the IPAM's lease of %s is held by endpoint %s of network %s: remove that container first", pluginapi.ErrConflict, addr, dockerid.Short(l.EndpointID), dockerid.Short(l.NetworkID))
}
