package driver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// The MAC of a macvlan endpoint Docker gave none: with the stable policy
// (the default) it is derived from the parent and the endpoint's address,
// so that the same address on the same host's parent always gets the same
// MAC — across container re-creation, network re-creation and reboots —
// and the LAN's switches, neighbour caches, DHCP reservations and
// monitoring keep seeing one device. With random it is drawn anew for
// every endpoint (Docker's built-ins' behaviour).

// OptMacAddressPolicy chooses how a macvlan endpoint's MAC is made when
// Docker gives none.
const OptMacAddressPolicy = "mac_address_policy"

const (
	macStable = "stable"
	macRandom = "random"
)

var macPolicies = []string{macStable, macRandom}

// parseMacPolicy validates mac_address_policy for a network of type typ;
// absent is stable.
func parseMacPolicy(opts map[string]string, typ string) (string, error) {
	v, ok := opts[OptMacAddressPolicy]
	if !ok {
		return macStable, nil
	}
	if !oneOf(v, macPolicies) {
		return "", invalidf("mac_address_policy %q is not valid: use one of %s", v, strings.Join(macPolicies, ", "))
	}
	if typ == typeIpvlan {
		return "", invalidf("mac_address_policy=%s does not apply to type=ipvlan: ipvlan endpoints share the MAC address of their parent; drop the option, or use a macvlan network", v)
	}
	return v, nil
}

// stableMAC derives a locally administered unicast MAC from the parent's
// base address (its permanent one where the kernel knows it), the parent's
// VLAN ID (0 if none) and the endpoint's address: the first six bytes of
// SHA-256 over them, with the local bit set and the multicast bit cleared.
func stableMAC(base net.HardwareAddr, vlan int, addr netip.Addr) net.HardwareAddr {
	h := sha256.New()
	h.Write([]byte("underlay stable MAC v1\x00"))
	h.Write(base)
	var v [2]byte
	binary.BigEndian.PutUint16(v[:], uint16(vlan))
	h.Write(v[:])
	a := addr.Unmap().As16()
	h.Write(a[:])
	mac := net.HardwareAddr(h.Sum(nil)[:6])
	mac[0] = (mac[0] | 0x02) &^ 0x01
	return mac
}

// macBase is what a stable MAC is derived from on parent p: its permanent
// address where the kernel reports one, or, for a VLAN link (which has
// none), its base link's; otherwise the parent's current address.
func macBase(p netlinkutil.Link, links []netlinkutil.Link) net.HardwareAddr {
	if m, err := net.ParseMAC(p.PermMAC); err == nil {
		return m
	}
	if p.Kind == netlinkutil.KindVLAN {
		for _, l := range links {
			if l.Index == p.ParentIndex {
				if m, err := net.ParseMAC(l.PermMAC); err == nil {
					return m
				}
			}
		}
	}
	m, _ := net.ParseMAC(p.MAC)
	return m
}

// macTaken reports whether parent p or a link on it already has mac: the
// kernel would refuse to bring a second one up.
func macTaken(p netlinkutil.Link, links []netlinkutil.Link, mac string) bool {
	if strings.EqualFold(p.MAC, mac) {
		return true
	}
	for _, l := range links {
		if l.ParentIndex == p.Index && strings.EqualFold(l.MAC, mac) {
			return true
		}
	}
	return false
}

// endpointMAC chooses the MAC of a macvlan endpoint Docker gave none: the
// one it had when Docker asks again, else the policy's.
func (d *Driver) endpointMAC(ctx context.Context, n store.Network, ep store.Endpoint, existing *store.Endpoint) string {
	if existing != nil && existing.MAC != "" {
		return existing.MAC
	}
	policy, err := parseMacPolicy(n.Options, n.Type)
	addr := firstAddr(ep)
	if err != nil || policy == macRandom || !addr.IsValid() || dhcpOf(n).On {
		return randomMAC().String()
	}
	p, err := d.links.Get(ctx, n.Parent)
	if err != nil {
		d.log.Warn("using a random MAC: the parent could not be read for a stable one", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return randomMAC().String()
	}
	links, err := d.links.List(ctx)
	if err != nil {
		d.log.Warn("using a random MAC: the links could not be listed to check a stable one is free", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return randomMAC().String()
	}
	base := macBase(p, links)
	if base == nil {
		return randomMAC().String()
	}
	mac := stableMAC(base, p.VLAN, addr).String()
	if macTaken(p, links, mac) {
		d.log.Warn("using a random MAC: the stable MAC for the endpoint's address is already in use on the parent", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "address", addr, "mac", mac)
		return randomMAC().String()
	}
	return mac
}

// firstAddr is the endpoint's IPv4 address, else its IPv6 one.
func firstAddr(ep store.Endpoint) netip.Addr {
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(a); err == nil {
			return p.Addr()
		}
	}
	return netip.Addr{}
}
