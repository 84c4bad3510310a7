package lancheck

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/underlay-net/underlay/dhcp"
)

// The causes of a LAN that drops new source MACs, named in new-mac's fix.
const dropsNewMACs = "the LAN drops frames from source MACs it does not know: a switch port with port security (a MAC limit or sticky MACs), " +
	"a hypervisor that rejects new MACs (VMware: MAC address changes, forged transmits and promiscuous mode rejected; Hyper-V: MAC address spoofing off), " +
	"or a cloud network (VPC) that accepts only the MACs it assigned"

// Judge turns what Observe saw into one item per check (gateway has one
// per family when the network uses IPv6). It is pure.
func Judge(n Network, o Observations) []Item {
	var out []Item
	add := func(it Item) { out = append(out, it) }
	add(judgeParent(n, o.Link))
	add(judgeWireless(n, o.Link))
	add(judgeMTU(n, o.Link, o.Routers))
	if sk, ok := o.Skipped[NewMAC]; ok {
		add(Item{Check: NewMAC, Verdict: Unknown, Evidence: sk.Why, Fix: sk.Fix})
	} else {
		add(judgeNewMAC(n, o))
	}
	add(judgeGateway4(n, o))
	if n.IPv6Mode != "" || n.Gateway6.IsValid() {
		add(judgeGateway6(n, o))
	}
	for _, c := range []Check{DHCP, IPv6RA, DHCPv6} {
		if sk, ok := o.Skipped[c]; ok {
			add(Item{Check: c, Verdict: Unknown, Evidence: sk.Why, Fix: sk.Fix})
			continue
		}
		switch c {
		case DHCP:
			add(judgeDHCP(n, o))
		case IPv6RA:
			add(judgeRA(n, o))
		case DHCPv6:
			add(judgeDHCPv6(n, o))
		}
	}
	return out
}

// Problems returns the items whose verdict is problem.
func Problems(items []Item) []Item {
	var out []Item
	for _, it := range items {
		if it.Verdict == Problem {
			out = append(out, it)
		}
	}
	return out
}

func skippedFix(n Network) string {
	return fmt.Sprintf("run `underlay doctor --lan %s` again once %s exists and is up", n.Parent, n.Parent)
}

func judgeParent(n Network, l LinkState) Item {
	it := Item{Check: Parent}
	switch {
	case !l.Exists && l.Base != nil && l.Base.Exists:
		it.Verdict, it.Evidence = OK, fmt.Sprintf("%s does not exist yet: underlay makes VLAN %d on %s at the network's create; %s", n.Parent, l.VLAN, l.BaseName, state(l.BaseName, *l.Base))
		if l.Base.Down || l.Base.NoCarrier {
			it.Verdict = Problem
			it.Fix = fmt.Sprintf("bring %s up and connect it (ip link set %s up; check its cable or its peer)", l.BaseName, l.BaseName)
		}
	case !l.Exists:
		it.Verdict, it.Evidence = Problem, fmt.Sprintf("parent %s does not exist: %s", n.Parent, l.Err)
		it.Fix = "give an existing link as the parent (ip -br link lists them), or a VLAN of one as LINK.VID"
	case l.NotEthernet:
		it.Verdict, it.Evidence = Problem, fmt.Sprintf("%s is not an Ethernet link (%s, hardware type %q): macvlan and ipvlan need an Ethernet parent", n.Parent, l.Kind, l.Encap)
		it.Fix = "give the LAN's Ethernet link (or a VLAN of it, LINK.VID) as the parent"
	case l.Down:
		it.Verdict, it.Evidence = Problem, state(n.Parent, l)
		it.Fix = fmt.Sprintf("bring %s up: ip link set %s up (containers on a down parent reach nothing)", n.Parent, n.Parent)
	case l.Base != nil && (l.Base.Down || l.Base.NoCarrier):
		it.Verdict, it.Evidence = Problem, state(n.Parent, l)+"; its base "+state(l.BaseName, *l.Base)
		it.Fix = fmt.Sprintf("bring the VLAN's base %s up and connect it", l.BaseName)
	case l.NoCarrier:
		it.Verdict, it.Evidence = Problem, state(n.Parent, l)
		it.Fix = fmt.Sprintf("connect %s: check its cable, switch port or peer; the kernel sees no carrier", n.Parent)
	default:
		it.Verdict, it.Evidence = OK, state(n.Parent, l)
		if l.Base != nil {
			it.Evidence += "; its base " + state(l.BaseName, *l.Base)
		}
	}
	return it
}

func state(name string, l LinkState) string {
	up := "up"
	if l.Down {
		up = "down"
	}
	carrier := "with carrier"
	if l.NoCarrier || l.Down {
		carrier = "without carrier"
	}
	return fmt.Sprintf("%s is %s %s (%s, MTU %d)", name, up, carrier, l.Kind, l.MTU)
}

func judgeWireless(n Network, l LinkState) Item {
	it := Item{Check: Wireless, Verdict: OK}
	switch {
	case !l.Exists && (l.Base == nil || !l.Base.Exists):
		it.Verdict, it.Evidence = Unknown, fmt.Sprintf("%s does not exist: the kernel cannot say whether it is wireless", n.Parent)
		it.Fix = skippedFix(n)
	case !l.Wireless && (l.Base == nil || !l.Base.Wireless):
		it.Evidence = fmt.Sprintf("%s is not a wireless (802.11) link", n.Parent)
		if l.Base != nil {
			it.Evidence += ", nor is its base " + l.BaseName
		}
	case n.Type == "ipvlan":
		it.Evidence = fmt.Sprintf("%s is a wireless (802.11) link; ipvlan sends with %s's own MAC, which the access point knows", n.Parent, n.Parent)
	case n.AllowWireless:
		it.Evidence = fmt.Sprintf("%s is a wireless (802.11) link and macvlan was allowed on it (allow_wireless=true)", n.Parent)
	default:
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("%s is (on) a wireless (802.11) link: an access point drops frames from MACs that did not associate with it, so macvlan containers cannot reach the LAN", n.Parent)
		it.Fix = "use -o type=ipvlan -o ipvlan_mode=l2 (containers share the parent's MAC; DHCP tells them apart by the client ID underlay sends)"
	}
	return it
}

func judgeMTU(n Network, l LinkState, routers []Router) Item {
	it := Item{Check: MTU, Verdict: OK}
	if !l.Exists {
		if l.Base != nil && l.Base.Exists {
			l = *l.Base
		} else {
			return Item{Check: MTU, Verdict: Unknown, Evidence: fmt.Sprintf("%s does not exist: its MTU is unknown", n.Parent), Fix: skippedFix(n)}
		}
	}
	switch {
	case n.MTU > l.MTU:
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("the network's MTU %d is larger than %s's MTU %d: the kernel refuses such a child, or frames larger than %d are lost", n.MTU, n.Parent, l.MTU, l.MTU)
		it.Fix = fmt.Sprintf("use -o mtu=%d or less, or raise %s's MTU (and the LAN's) first", l.MTU, n.Parent)
	case n.MTU > 0:
		it.Evidence = fmt.Sprintf("the network's MTU %d fits %s's MTU %d", n.MTU, n.Parent, l.MTU)
	default:
		it.Evidence = fmt.Sprintf("containers take %s's MTU %d", n.Parent, l.MTU)
	}
	mtu := n.MTU
	if mtu == 0 {
		mtu = l.MTU
	}
	for _, r := range routers {
		if r.MTU > 0 && r.MTU < mtu {
			it.Verdict = Problem
			it.Evidence += fmt.Sprintf("; but router %s advertises MTU %d for the LAN, less than the containers' %d", r.Source, r.MTU, mtu)
			it.Fix = fmt.Sprintf("use -o mtu=%d (the LAN's), or fix the router's advertised MTU", r.MTU)
		}
	}
	return it
}

func judgeNewMAC(n Network, o Observations) Item {
	it := Item{Check: NewMAC}
	p, c := o.Parent4, o.Child4
	fix := fmt.Sprintf("use -o type=ipvlan -o ipvlan_mode=l2 (one MAC, %s's), or allow new MACs on %s's switch port or virtual switch (port security off or a higher MAC limit; VMware: accept MAC address changes and forged transmits, or promiscuous mode; Hyper-V: enable MAC address spoofing)", n.Parent, n.Parent)
	switch {
	case n.Type == "ipvlan":
		it.Verdict, it.Evidence = OK, "ipvlan containers send with the parent's MAC: no new MAC goes on the LAN"
	case c.Answered:
		it.Verdict = OK
		it.Evidence = fmt.Sprintf("%s (%s) answered ARP from a throwaway macvlan child with the new MAC %s", c.Target, mac(c.AnswerMAC), c.From)
	case p.Answered && o.ChildErr == "" && c.Err == "":
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("%s (%s) answered ARP from %s but not from a throwaway macvlan child with the new MAC %s: %s", p.Target, mac(p.AnswerMAC), p.From, c.From, dropsNewMACs)
		it.Fix = fix
	case len(o.Offers) > 0:
		it.Verdict = OK
		it.Evidence = fmt.Sprintf("DHCP server %s (%s) answered a DISCOVER from the new MAC", o.Offers[0].Server, mac(o.Offers[0].ServerMAC))
	case len(o.ParentOffers) > 0:
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("DHCP server %s (%s) answered a DISCOVER from %s's own MAC but none answered one from a new MAC: %s", o.ParentOffers[0].Server, mac(o.ParentOffers[0].ServerMAC), n.Parent, dropsNewMACs)
		it.Fix = fix
	case o.ChildErr != "":
		it.Verdict, it.Evidence = Unknown, "no throwaway child could be made: "+o.ChildErr
		it.Fix = "run `underlay doctor --lan " + n.Parent + "` on the host as root"
	case !p.Target.IsValid():
		it.Verdict, it.Evidence = Unknown, "no host to ask is known: the network has no gateway, the host has no default route through "+n.Parent+" and no DHCP server answered"
		it.Fix = "give the network's gateway (--network with a network that has one) and run it again"
	case p.Err != "" || c.Err != "":
		it.Verdict, it.Evidence = Unknown, "the ARP probes could not be sent: "+strings.Trim(p.Err+"; "+c.Err, "; ")
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
	default:
		it.Verdict = Unknown
		it.Evidence = fmt.Sprintf("%s answered ARP from neither %s nor a throwaway child, and no DHCP server answered: nothing to compare", p.Target, p.From)
		it.Fix = "see the gateway check"
	}
	return it
}

func mac(m net.HardwareAddr) string {
	if len(m) == 0 {
		return "MAC unknown"
	}
	return m.String()
}

func judgeGateway4(n Network, o Observations) Item {
	it := Item{Check: Gateway, Family: "ipv4"}
	p := o.Parent4
	switch {
	case !p.Target.IsValid():
		it.Verdict, it.Evidence = Unknown, "no IPv4 gateway is known: the network has none, the host has no default route through "+n.Parent+" and no DHCP offer named a router"
		it.Fix = "give the network a gateway (--gateway) if its containers must leave the LAN"
	case p.Err != "":
		it.Verdict, it.Evidence = Unknown, fmt.Sprintf("%s (%s) could not be asked: %s", p.Target, o.Parent4From, p.Err)
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
	case p.Answered:
		it.Verdict, it.Evidence = OK, fmt.Sprintf("%s (%s) answered ARP from %s: it is %s", p.Target, o.Parent4From, p.From, mac(p.AnswerMAC))
	default:
		it.Verdict, it.Evidence = Problem, fmt.Sprintf("%s (%s) did not answer ARP from %s within the budget", p.Target, o.Parent4From, p.From)
		it.Fix = fmt.Sprintf("check the gateway address (docker network inspect), that the router is up, and that %s is on its LAN or VLAN", n.Parent)
	}
	return it
}

func judgeGateway6(n Network, o Observations) Item {
	it := Item{Check: Gateway, Family: "ipv6"}
	p := o.Parent6
	switch {
	case p.Target.IsValid() && p.Err != "":
		it.Verdict, it.Evidence = Unknown, fmt.Sprintf("%s (%s) could not be asked: %s", p.Target, o.Parent6From, p.Err)
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
	case p.Target.IsValid() && p.Answered:
		it.Verdict, it.Evidence = OK, fmt.Sprintf("%s (%s) answered a neighbour solicitation from %s: it is %s", p.Target, o.Parent6From, p.From, mac(p.AnswerMAC))
	case p.Target.IsValid():
		it.Verdict, it.Evidence = Problem, fmt.Sprintf("%s (%s) did not answer a neighbour solicitation from %s within the budget", p.Target, o.Parent6From, p.From)
		it.Fix = fmt.Sprintf("check the IPv6 gateway address, that the router is up, and that %s is on its LAN or VLAN", n.Parent)
	case defaultRouter(o.Routers) != nil:
		r := defaultRouter(o.Routers)
		it.Verdict, it.Evidence = OK, fmt.Sprintf("router %s (%s) advertises itself as a default router (lifetime %s)", r.Source, mac(r.MAC), r.Lifetime)
	default:
		it.Verdict, it.Evidence = Unknown, "no IPv6 gateway is known: the network has none, the host has no IPv6 default route through "+n.Parent+" and no router advertised itself"
		it.Fix = "give the network an IPv6 gateway (--gateway with --ipv6) if its containers must leave the LAN"
	}
	return it
}

func defaultRouter(rs []Router) *Router {
	for i := range rs {
		if rs[i].Lifetime > 0 {
			return &rs[i]
		}
	}
	return nil
}

func judgeDHCP(n Network, o Observations) Item {
	it := Item{Check: DHCP}
	all := distinctOffers(o.Offers, o.ParentOffers)
	switch {
	case o.OffersErr != "":
		it.Verdict, it.Evidence = Unknown, "no DISCOVER could be sent: "+o.OffersErr
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
		return it
	case len(all) == 0 && n.DHCP:
		it.Verdict, it.Evidence = Problem, "no DHCP server answered a DISCOVER from a throwaway MAC within the budget, and the network takes its addresses from DHCP"
		it.Fix = fmt.Sprintf("start or reach the LAN's DHCP server (is %s on the right LAN or VLAN? a relay for it?), or create the network with --subnet and --gateway instead of dhcp", n.Parent)
		return it
	case len(all) == 0:
		it.Verdict, it.Evidence = Unknown, "no DHCP server answered a DISCOVER from a throwaway MAC within the budget; the network does not use DHCP"
		return it
	}
	offers := make([]string, 0, len(all))
	for _, of := range all {
		offers = append(offers, describeOffer(of))
	}
	sort.Strings(offers)
	it.Evidence = fmt.Sprintf("%d DHCP server(s) answered: %s", len(all), strings.Join(offers, "; "))
	switch {
	case len(all) > 1:
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("%d DHCP servers answered one DISCOVER (a rogue server is suspected): %s", len(all), strings.Join(offers, "; "))
		it.Fix = "find the server that should not be there by its MAC (the switch's MAC table names its port) and stop it, or enable DHCP snooping on the switch"
	case len(o.Offers) == 0 && n.DHCP:
		it.Verdict = Problem
		it.Evidence += fmt.Sprintf(", to the DISCOVER from %s's own MAC only: none from a new MAC came back, and containers ask with new MACs (see new-mac)", n.Parent)
		it.Fix = "let the LAN carry new MACs (see new-mac's fix), or use -o type=ipvlan -o ipvlan_mode=l2"
	default:
		it.Verdict = OK
		if len(o.Offers) == 0 {
			it.Evidence += fmt.Sprintf(", to the DISCOVER from %s's own MAC only (see new-mac)", n.Parent)
		}
		if !n.DHCP {
			it.Evidence += " (the network does not use DHCP: keep its subnet out of the server's range)"
		}
	}
	return it
}

// distinctOffers are the offers of both DISCOVERs, one per server.
func distinctOffers(lists ...[]dhcp.Offer) []dhcp.Offer {
	var out []dhcp.Offer
	seen := map[string]bool{}
	for _, l := range lists {
		for _, of := range l {
			key := of.Server.String() + " " + mac(of.ServerMAC)
			if !seen[key] {
				seen[key] = true
				out = append(out, of)
			}
		}
	}
	return out
}

func describeOffer(of dhcp.Offer) string {
	s := fmt.Sprintf("server %s (%s) offered %s", of.Server, mac(of.ServerMAC), of.Addr)
	if of.Router.IsValid() {
		s += ", router " + of.Router.String()
	}
	if of.LeaseTime > 0 {
		s += ", lease " + of.LeaseTime.String()
	}
	return s
}

func judgeRA(n Network, o Observations) Item {
	it := Item{Check: IPv6RA}
	wants := n.IPv6Mode == "slaac" || n.IPv6Mode == "dhcpv6"
	switch {
	case o.RoutersErr != "":
		it.Verdict, it.Evidence = Unknown, "no router solicitation could be sent: "+o.RoutersErr
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
		return it
	case len(o.Routers) == 0 && wants:
		it.Verdict, it.Evidence = Problem, fmt.Sprintf("no router advertisement within the budget, and ipv6_mode=%s needs one", n.IPv6Mode)
		it.Fix = fmt.Sprintf("make the LAN's router send router advertisements on %s's LAN (radvd, the router's IPv6 RA setting), or use ipv6_mode=static with --ipv6 --subnet", n.Parent)
		return it
	case len(o.Routers) == 0:
		it.Verdict, it.Evidence = Unknown, "no router advertisement within the budget; the network does not take IPv6 from the LAN"
		return it
	}
	var seen []string
	hasSLAAC, hasM := false, false
	for _, r := range o.Routers {
		seen = append(seen, describeRouter(r))
		hasM = hasM || r.Managed
		for _, p := range r.Prefixes {
			hasSLAAC = hasSLAAC || (p.Autonomous && p.Prefix.Bits() == 64)
		}
	}
	it.Evidence = strings.Join(seen, "; ")
	it.Verdict = OK
	switch {
	case n.IPv6Mode == "slaac" && !hasSLAAC:
		it.Verdict = Problem
		it.Evidence += "; ipv6_mode=slaac needs a /64 prefix with the autonomous (A) flag, and none is advertised"
		it.Fix = "advertise the LAN's /64 with the A flag on the router, or use ipv6_mode=dhcpv6 if the LAN gives addresses by DHCPv6 (M flag)"
	case n.IPv6Mode == "dhcpv6" && !hasM:
		it.Verdict = Problem
		it.Evidence += "; ipv6_mode=dhcpv6 expects the managed (M) flag, and no router sets it: hosts on this LAN do not use DHCPv6 for addresses"
		it.Fix = "set the M flag on the router if the LAN has a DHCPv6 server, or use ipv6_mode=slaac"
	}
	return it
}

func describeRouter(r Router) string {
	var ps []string
	for _, p := range r.Prefixes {
		flags := ""
		if p.OnLink {
			flags += "L"
		}
		if p.Autonomous {
			flags += "A"
		}
		ps = append(ps, fmt.Sprintf("%s [%s]", p.Prefix, flags))
	}
	pre := "no prefixes"
	if len(ps) > 0 {
		pre = "prefixes " + strings.Join(ps, ", ")
	}
	return fmt.Sprintf("router %s (%s): M=%t O=%t, router lifetime %s, %s", r.Source, mac(r.MAC), r.Managed, r.Other, r.Lifetime, pre)
}

func judgeDHCPv6(n Network, o Observations) Item {
	it := Item{Check: DHCPv6}
	switch {
	case o.AdvertErr != "":
		it.Verdict, it.Evidence = Unknown, "no Solicit could be sent: "+o.AdvertErr
		it.Fix = "check that " + n.Parent + " is up and that underlay may open packet sockets (CAP_NET_RAW)"
		return it
	case len(o.Advertises) == 0 && n.IPv6Mode == "dhcpv6":
		it.Verdict, it.Evidence = Problem, "no DHCPv6 server answered a Solicit from a throwaway MAC within the budget, and ipv6_mode=dhcpv6 takes addresses from one"
		it.Fix = "start or reach the LAN's DHCPv6 server, or use ipv6_mode=slaac (if routers advertise an autonomous prefix) or static"
		return it
	case len(o.Advertises) == 0:
		it.Verdict, it.Evidence = Unknown, "no DHCPv6 server answered a Solicit within the budget; the network does not take addresses from DHCPv6"
		return it
	}
	var seen []string
	for _, a := range o.Advertises {
		s := fmt.Sprintf("server %s (%s, %s)", hexColons(a.ServerID), a.Source, mac(a.ServerMAC))
		switch {
		case len(a.Addrs) > 0:
			s += " offered " + joinAddrs(a.Addrs)
		case a.Status != "":
			s += " has no address: " + a.Status
		}
		seen = append(seen, s)
	}
	sort.Strings(seen)
	it.Verdict = OK
	it.Evidence = fmt.Sprintf("%d DHCPv6 server(s) answered: %s", len(o.Advertises), strings.Join(seen, "; "))
	withAddrs := 0
	for _, a := range o.Advertises {
		if len(a.Addrs) > 0 {
			withAddrs++
		}
	}
	if withAddrs == 0 && n.IPv6Mode == "dhcpv6" {
		it.Verdict = Problem
		it.Evidence += "; none offered an address, and ipv6_mode=dhcpv6 takes addresses from it"
		it.Fix = "give the DHCPv6 server an address range for this LAN, or use ipv6_mode=slaac if routers advertise an autonomous prefix"
	}
	if len(o.Advertises) > 1 {
		it.Verdict = Problem
		it.Evidence = fmt.Sprintf("%d DHCPv6 servers answered one Solicit (a rogue server is suspected): %s", len(o.Advertises), strings.Join(seen, "; "))
		it.Fix = "find the server that should not be there by its MAC and stop it, or enable DHCPv6 guard on the switch"
	}
	return it
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// hexColons is a DUID as hex bytes joined by colons, as servers log it.
func hexColons(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, ":")
}
