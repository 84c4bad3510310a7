// Package lancheck is the LAN preflight: it finds out whether what a
// container on a parent would send gets through the LAN (new source MACs,
// a Wi-Fi parent, DHCP and DHCPv6 servers, router advertisements, the
// gateway, the MTU, the parent's state) and says, per check, ok, problem
// or unknown with the evidence and the fix.
//
// Plan, then act: Observe (observe.go) gathers what the kernel and the
// LAN show into Observations; Judge (judge.go) is pure and turns them into
// Items. On the wire Observe sends only what a host joining the LAN sends:
// ARP probes, router solicitations, DHCP DISCOVERs and DHCPv6 Solicits
// (never a REQUEST or a Request, so nothing is leased), never ICMP echo
// and never an announcement.
package lancheck

import (
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
)

// Check names a check (fixed: tools read them from --json).
type Check string

const (
	NewMAC   Check = "new-mac"
	Wireless Check = "wireless"
	DHCP     Check = "dhcp"
	IPv6RA   Check = "ipv6-ra"
	DHCPv6   Check = "dhcpv6"
	Gateway  Check = "gateway"
	MTU      Check = "mtu"
	Parent   Check = "parent"
)

// Checks are every check, in the order they are reported.
var Checks = []Check{Parent, Wireless, MTU, NewMAC, Gateway, DHCP, IPv6RA, DHCPv6}

// Verdict is a check's outcome (fixed).
type Verdict string

const (
	OK      Verdict = "ok"
	Problem Verdict = "problem"
	Unknown Verdict = "unknown"
)

// Item is one check's verdict; a check may have one item per family.
type Item struct {
	Check Check `json:"check"`
	// Family is "ipv4" or "ipv6" where a check has an item per family.
	Family   string  `json:"family,omitempty"`
	Verdict  Verdict `json:"verdict"`
	Evidence string  `json:"evidence"`
	Fix      string  `json:"fix"`
}

// Name is the item's check, with its family when it has one ("dhcp",
// "gateway/ipv6"): how logs and findings name it.
func (it Item) Name() string {
	if it.Family != "" {
		return string(it.Check) + "/" + it.Family
	}
	return string(it.Check)
}

// Network is what the checks need to know of a network: from a
// network's config (--network, or the daemon at create) or from -o.
type Network struct {
	// Parent is the link the network's endpoints are made on: a VLAN
	// link as eth0.10.
	Parent string
	// Type is "macvlan" or "ipvlan"; Mode its mode.
	Type, Mode string
	// DHCP: the network takes its IPv4 addresses from the LAN's DHCP.
	DHCP bool
	// IPv6Mode is the network's ipv6_mode: "" (no IPv6 from the LAN),
	// "static", "slaac" or "dhcpv6".
	IPv6Mode string
	// Gateway4 and Gateway6 are the network's gateways, if it has them.
	Gateway4, Gateway6 netip.Addr
	// MTU is the network's MTU option; 0 means the parent's.
	MTU int
	// AllowWireless: the user said macvlan on this Wi-Fi parent is meant.
	AllowWireless bool
}

// Router is a router advertisement.
type Router struct {
	// Source is the router's link-local address; MAC the Ethernet source.
	Source netip.Addr
	MAC    net.HardwareAddr
	// Managed and Other are the M and O flags.
	Managed, Other bool
	// Lifetime is the router lifetime (0: not a default router).
	Lifetime time.Duration
	// Prefixes are the prefix information options.
	Prefixes []RAPrefix
	// MTU is the MTU option; 0 without one.
	MTU int
}

// RAPrefix is a prefix information option.
type RAPrefix struct {
	Prefix             netip.Prefix
	OnLink, Autonomous bool
	Valid, Preferred   time.Duration
}

// Reach is whether a target answered an ARP probe (IPv4) or a
// Neighbour Solicitation (IPv6) sent from a link.
type Reach struct {
	// Target is the address asked for; invalid when none was known.
	Target netip.Addr
	// From names the sender ("the parent eth0", "a new MAC 02:...").
	From string
	// Answered: a reply came; AnswerMAC is its Ethernet source.
	Answered  bool
	AnswerMAC net.HardwareAddr
	// Err is why the probe could not be sent ("" when it was).
	Err string
}

// LinkState is what the kernel says of the parent.
type LinkState struct {
	// Exists is false when the link is missing (Err says why).
	Exists                    bool
	Err                       string
	Kind                      string
	Down, NoCarrier, Wireless bool
	MTU                       int
	// NotEthernet: the link has no Ethernet MAC (a tun, WireGuard or
	// loopback link; Encap is its hardware type).
	NotEthernet bool
	Encap       string
	// Base is the state of a VLAN's base link (nil when not a VLAN);
	// BaseName its name and VLAN the VLAN's ID (also when the VLAN does
	// not exist yet and its name says LINK.VID).
	Base     *LinkState
	BaseName string
	VLAN     int
}

// Observations are what Observe saw; the zero value of a part means it
// was not looked at (its Err, or Skipped, says why).
type Observations struct {
	Link LinkState
	// HostGateway4/6 are the host's default routes' gateways through the
	// parent, if any.
	HostGateway4, HostGateway6 netip.Addr
	// Parent4 and Child4 are the IPv4 reach of the gateway (or another
	// answering host) from the parent and from a throwaway macvlan child
	// with a new MAC; Parent6 the IPv6 reach from the parent.
	Parent4, Child4, Parent6 Reach
	// Parent4From and Parent6From say where the targets came from ("the
	// network's gateway", ...).
	Parent4From, Parent6From string
	// ChildErr says why no throwaway child could be made ("" when it was,
	// or when the network's type needs none).
	ChildErr string
	// Offers are the DHCP OFFERs seen within the budget; OffersErr why
	// none could be asked for. The same for Routers and Advertises.
	Offers    []dhcp.Offer
	OffersErr string
	// ParentOffers are the OFFERs to a DISCOVER from the parent's own MAC
	// (macvlan networks only, beside the new MAC's).
	ParentOffers []dhcp.Offer
	// Listened is how long the collectors listened.
	Listened   time.Duration
	Routers    []Router
	RoutersErr string
	Advertises []dhcp6.Advertisement
	AdvertErr  string
	// Skipped names parts not looked at and why (ran out of budget, the
	// parent is missing): by check.
	Skipped map[Check]Skip
}

// Skip is a check not looked at: why, and what to do about it.
type Skip struct{ Why, Fix string }
