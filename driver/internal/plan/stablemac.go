package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// StableMAC derives a locally administered unicast MAC from the parent's
// base address (its permanent one where the kernel knows it), the parent's
// VLAN ID (0 if none) and the endpoint's address: the first six bytes of
// SHA-256 over them, with the local bit set and the multicast bit cleared.
func StableMAC(base net.HardwareAddr, vlan int, addr netip.Addr) net.HardwareAddr {
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

// MACBase is what a stable MAC is derived from on parent p: its permanent
// address where the kernel reports one, or, for a VLAN link (which has
// none), its base link's; otherwise the parent's current address.
func MACBase(p kernel.Link, links []kernel.Link) net.HardwareAddr {
	if m, err := net.ParseMAC(p.PermMAC); err == nil {
		return m
	}
	if p.Kind == kernel.KindVLAN {
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

// MACTaken reports whether parent p or a link on it already has mac: the
// kernel would refuse to bring a second one up.
func MACTaken(p kernel.Link, links []kernel.Link, mac string) bool {
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

// FirstAddr is the endpoint's IPv4 address, else its IPv6 one.
func FirstAddr(ep record.Endpoint) netip.Addr {
	for _, a := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(a); err == nil {
			return p.Addr()
		}
	}
	return netip.Addr{}
}
