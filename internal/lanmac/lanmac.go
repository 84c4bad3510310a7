// Package lanmac derives the MACs underlay gives endpoints on a LAN: the
// stable MAC of an address (StableMAC) and the MAC of a name (NameMAC),
// each from the parent's base address (MACBase) and VLAN, so the same
// address, or the same container name, gets the same MAC on that parent
// after any re-creation. It is a leaf: the driver, the IPAM and the
// command line (underlay mac) derive them alike.
package lanmac

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// StableMAC derives a locally administered unicast MAC from the parent's
// base address (its permanent one where the kernel knows it), the parent's
// VLAN ID (0 if none) and the endpoint's address: the first six bytes of
// SHA-256 over them, with the local bit set and the multicast bit cleared.
func StableMAC(base net.HardwareAddr, vlan int, addr netip.Addr) net.HardwareAddr {
	a := addr.Unmap().As16()
	return derive("underlay stable MAC v1\x00", base, vlan, a[:])
}

// derive is the first six bytes of SHA-256 over tag, base, vlan (2 bytes,
// big-endian) and tail, with the local bit set and the multicast bit
// cleared.
func derive(tag string, base net.HardwareAddr, vlan int, tail []byte) net.HardwareAddr {
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write(base)
	var v [2]byte
	binary.BigEndian.PutUint16(v[:], uint16(vlan))
	h.Write(v[:])
	h.Write(tail)
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

// NameMAC derives the MAC of an endpoint name on a parent: the first six
// bytes of SHA-256 over "underlay name MAC v1\x00", the parent's base
// address (MACBase), its VLAN ID (0 if none) as 2 bytes big-endian and
// the name (a leading "/" dropped, as Docker shows container names), with
// the local bit set and the multicast bit cleared. Not the network's ID:
// a network that is re-created (docker compose down, up) keeps it.
func NameMAC(base net.HardwareAddr, vlan int, name string) net.HardwareAddr {
	return derive("underlay name MAC v1\x00", base, vlan, []byte(strings.TrimPrefix(name, "/")))
}

// HostLabel makes a container name a DNS label (RFC 1123) to tell the
// LAN as its host name: letters, digits and hyphens, at most 63, neither
// first nor last a hyphen; "_" and "." become "-" and anything else is
// dropped. ok is false when nothing usable is left (the name is not
// told).
func HostLabel(name string) (label string, ok bool) {
	var b strings.Builder
	for _, r := range strings.TrimPrefix(name, "/") {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '_' || r == '.':
			b.WriteByte('-')
		}
	}
	label = strings.Trim(b.String(), "-")
	if len(label) > 63 {
		label = strings.TrimRight(label[:63], "-")
	}
	return label, label != ""
}

// Random returns a locally administered unicast MAC.
func Random() net.HardwareAddr {
	mac := make(net.HardwareAddr, 6)
	_, _ = rand.Read(mac)
	mac[0] = (mac[0] | 0x02) &^ 0x01
	return mac
}
