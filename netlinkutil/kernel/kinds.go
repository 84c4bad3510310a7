package kernel

import (
	"strconv"
	"strings"
)

// The kernel vocabulary of underlay, in one place: link kinds as rtnetlink
// names them, and the mode and flag names of macvlan and ipvlan links (the
// names Docker's built-in drivers and iproute2 use). The driver validates
// options against these lists; this package maps them to netlink values.

// Link kinds.
const (
	KindMacvlan = "macvlan"
	KindIpvlan  = "ipvlan"
	KindVLAN    = "vlan"
	KindDummy   = "dummy"
	KindBridge  = "bridge"
)

// Mode and flag names.
const (
	MacvlanBridge   = "bridge"
	MacvlanPrivate  = "private"
	MacvlanVEPA     = "vepa"
	MacvlanPassthru = "passthru"

	IpvlanL2  = "l2"
	IpvlanL3  = "l3"
	IpvlanL3S = "l3s"

	IpvlanFlagBridge  = "bridge"
	IpvlanFlagPrivate = "private"
	IpvlanFlagVEPA    = "vepa"
)

// MacvlanModes, IpvlanModes and IpvlanFlags list the valid names, the
// default first.
var (
	MacvlanModes = []string{MacvlanBridge, MacvlanPrivate, MacvlanVEPA, MacvlanPassthru}
	IpvlanModes  = []string{IpvlanL2, IpvlanL3, IpvlanL3S}
	IpvlanFlags  = []string{IpvlanFlagBridge, IpvlanFlagPrivate, IpvlanFlagVEPA}
)

// IsEndpointKind reports whether a link kind is one underlay gives
// containers (macvlan or ipvlan).
func IsEndpointKind(kind string) bool { return kind == KindMacvlan || kind == KindIpvlan }

// MarkPrefix starts the IFLA_IFALIAS underlay writes on every link it
// creates: MarkPrefix + the instance ID of the state file that owns it.
const MarkPrefix = "underlay:"

// Mark returns the alias that marks a link as owned by the state file with
// the given instance ID.
func Mark(instance string) string { return MarkPrefix + instance }

// FindLink finds a link of a list by its kernel name, then by an altname
// (the kernel's own lookup order: a name is never another link's altname).
func FindLink(links []Link, name string) (Link, bool) {
	for _, l := range links {
		if l.Name == name {
			return l, true
		}
	}
	for _, l := range links {
		if l.HasName(name) {
			return l, true
		}
	}
	return Link{}, false
}

// SplitVLAN parses a VLAN link's conventional name, "base.vid" (the VLAN
// ID is not range-checked).
func SplitVLAN(name string) (base string, vid int, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	vid, err := strconv.Atoi(name[i+1:])
	if err != nil || strings.ContainsAny(name[i+1:], "+-") {
		return "", 0, false
	}
	return name[:i], vid, true
}
