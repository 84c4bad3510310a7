// Package kernel holds the kernel's objects as plain values, as underlay
// speaks of them: links, endpoints to create, addresses and routes, the
// link kinds and the mode and flag names, and underlay's mark. It is a
// leaf: it imports nothing but the standard library and touches no
// kernel, so pure code (driver/internal/config, driver/internal/plan) can
// speak of links without linking netlink. Package netlinkutil, which talks
// to the kernel, reads and writes these values; everyone spells them
// kernel.Link, kernel.KindMacvlan, ... (one name each).
package kernel

import "net/netip"

// MaxNameLen is the longest interface name the kernel accepts (IFNAMSIZ-1).
const MaxNameLen = 15

// Link is what underlay needs to know about a kernel link.
type Link struct {
	Name  string
	Index int
	// Kind is the rtnetlink kind: "macvlan", "ipvlan", "vlan", "dummy",
	// "veth", "bridge", "device" (a physical NIC or loopback), ...
	Kind string
	// ParentIndex is the index of the lower link (macvlan, ipvlan, vlan).
	ParentIndex int
	MTU         int
	// VLAN is the 802.1Q ID of a vlan link.
	VLAN int
	// Mode is the macvlan or ipvlan mode ("bridge", "l2", ...).
	Mode string
	// Flag is the ipvlan flag ("bridge", "private", "vepa").
	Flag string
	MAC  string
	// PermMAC is the link's permanent hardware address (IFLA_PERM_ADDRESS),
	// which the kernel reports for devices that have one (NICs, not veth,
	// VLAN or macvlan links); empty otherwise.
	PermMAC string
	// Alias is the link's IFLA_IFALIAS: underlay's mark on links it made.
	Alias string
	// AltNames are the link's alternative names (`ip link property add`).
	AltNames []string
	// Encap is the link's hardware type as the kernel names it: "ether"
	// for Ethernet, "none" (WireGuard, tun), "ppp", "ipip", "loopback"...
	// Empty when unknown.
	Encap string
	// Down is set when the link is administratively down (IFF_UP clear).
	Down bool
	// NoCarrier is set when the link is up but has no carrier
	// (IFF_LOWER_UP clear: no cable, no peer, a VLAN whose base is down).
	NoCarrier bool
	// Wireless is set when the link is an 802.11 (Wi-Fi) device: the
	// kernel shows it a phy80211 or wireless entry in sysfs. Filled by Get
	// only (not List or the kept links).
	Wireless bool
}

// Ethernet reports whether the link carries Ethernet frames, which
// macvlan and ipvlan links need below them. An unknown type counts.
func (l Link) Ethernet() bool { return l.Encap == "" || l.Encap == "ether" }

// HasName reports whether name is the link's name or one of its altnames.
func (l Link) HasName(name string) bool {
	if l.Name == name {
		return true
	}
	for _, a := range l.AltNames {
		if a == name {
			return true
		}
	}
	return false
}

// Endpoint describes a macvlan or ipvlan link to create.
type Endpoint struct {
	Name string
	// Parent is the name of the lower link.
	Parent string
	// Type is "macvlan" or "ipvlan".
	Type string
	// Mode is the macvlan mode or the ipvlan mode, Flag the ipvlan flag.
	Mode, Flag string
	// MTU is set at creation when non-zero.
	MTU int
	// MAC is set at creation when non-empty (macvlan only).
	MAC string
	// Mark is written as the link's alias right after creation.
	Mark string
}

// Addr is an address on a link, with its prefix length.
type Addr struct {
	Prefix    netip.Prefix
	LinkIndex int
}

// Route is a route of any of the host's routing tables.
type Route struct {
	// Dst is the destination; 0.0.0.0/0 or ::/0 for a default route.
	Dst netip.Prefix
	// Gateway is the next hop, if the route has one.
	Gateway   netip.Addr
	LinkIndex int
	Table     int
	// Priority is the route's metric; the lowest wins.
	Priority int
}

// MainTable is the routing table ordinary routes live in (RT_TABLE_MAIN).
const MainTable = 254 // unix.RT_TABLE_MAIN

// Default reports whether the route is a default route.
func (r Route) Default() bool { return r.Dst.Bits() == 0 }

// Connected reports whether the route is a main-table route straight onto
// its link (no gateway) to a prefix other than the default: the route of
// a LAN the link is on.
func (r Route) Connected() bool {
	return r.Table == MainTable && !r.Gateway.IsValid() && !r.Default() && r.LinkIndex > 0
}
