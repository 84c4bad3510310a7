package lancheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// DefaultBudget bounds a run whose context has no deadline.
const DefaultBudget = 5 * time.Second

// probeBudget is how long one ARP probe or neighbour solicitation of a
// reach check waits for its answer (3 frames, as address probes send).
const probeBudget = 600 * time.Millisecond

// askAfter is what the collectors leave of the budget when no gateway is
// known: the time to ask the router a DHCP offer names. Servers answer
// late (dnsmasq pings an address for about 3 s before it offers it), so
// the collectors listen for all the rest.
const askAfter = 2*probeBudget + 200*time.Millisecond

// collectMargin is what they leave when the gateway is known already.
const collectMargin = 100 * time.Millisecond

// Observe gathers what the kernel and the LAN show of n's parent within
// ctx's deadline (DefaultBudget without one).
func Observe(ctx context.Context, env Env, n Network) Observations {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultBudget)
		defer cancel()
	}
	w := env.wire
	if w == nil {
		w = realWire{env: env}
	}
	o := Observations{Skipped: map[Check]Skip{}}
	parent, err := env.Kernel.Get(ctx, n.Parent)
	o.Link = linkState(ctx, env.Kernel, n.Parent, parent, err)
	if o.Link.Exists {
		if rs, err := env.Kernel.RoutesVia(ctx, parent.Index); err == nil {
			o.HostGateway4, o.HostGateway6 = defaultGateways(rs)
		}
	}
	if why := unusable(n.Parent, o.Link); why != "" {
		fix := fmt.Sprintf("fix the parent first (see the parent check), then run `underlay doctor --lan %s` again", n.Parent)
		for _, c := range []Check{NewMAC, DHCP, IPv6RA, DHCPv6} {
			o.Skipped[c] = Skip{Why: why, Fix: fix}
		}
		if g, from := gateway4(n, o.HostGateway4, nil); g.IsValid() {
			o.Parent4, o.Parent4From = Reach{Target: g, Err: why}, from
		}
		if g, from := gateway6(n, o.HostGateway6); g.IsValid() {
			o.Parent6, o.Parent6From = Reach{Target: g, Err: why}, from
		}
		return o
	}
	parentMAC, _ := net.ParseMAC(parent.MAC)
	ipvlan := n.Type == kernel.KindIpvlan
	// The throwaway client: a new MAC of its own on macvlan, the parent's
	// (as its endpoints have) on ipvlan.
	clientMAC := lanmac.Random()
	if ipvlan {
		clientMAC = parentMAC
	}

	target4, from4 := gateway4(n, o.HostGateway4, nil)
	deadline, _ := ctx.Deadline()
	end := deadline.Add(-collectMargin)
	if !target4.IsValid() {
		end = deadline.Add(-askAfter)
	}
	if o.Listened = time.Until(end); o.Listened < minListen {
		why := fmt.Sprintf("the budget left %s to listen for servers and routers, less than %s", max(o.Listened, 0).Round(time.Millisecond), minListen)
		fix := "give a longer --timeout (5s, the default, or more)"
		for _, c := range []Check{DHCP, IPv6RA, DHCPv6} {
			o.Skipped[c] = Skip{Why: why, Fix: fix}
		}
	}
	collect, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	if o.Listened >= minListen {
		wg.Go(func() {
			offers, err := w.Offers(collect, n.Parent, clientMAC, ipvlan)
			o.Offers, o.OffersErr = offers, errString(err)
		})
		if !ipvlan {
			// The same from the parent's own MAC (with a client ID, as on
			// ipvlan): a LAN that answers it and not the new MAC drops new
			// MACs, even where no gateway is known to ask.
			wg.Go(func() { o.ParentOffers, _ = w.Offers(collect, n.Parent, parentMAC, true) })
		}
		wg.Go(func() {
			rs, err := w.Routers(collect, n.Parent, clientMAC)
			o.Routers, o.RoutersErr = rs, errString(err)
		})
		wg.Go(func() {
			as, err := w.Advertises(collect, n.Parent, clientMAC)
			o.Advertises, o.AdvertErr = as, errString(err)
		})
	}
	var reach sync.WaitGroup
	if target4.IsValid() {
		o.Parent4From = from4
		reach.Go(func() { o.Parent4, o.Child4, o.ChildErr = reach4(ctx, w, n, parentMAC, target4) })
	}
	if g, from := gateway6(n, o.HostGateway6); g.IsValid() {
		o.Parent6From = from
		reach.Go(func() { o.Parent6 = w.Probe6(ctx, n.Parent, parentMAC, g) })
	}
	wg.Wait()
	if !target4.IsValid() {
		// A router or server a DHCP offer named is the host to ask.
		offers := append(append([]dhcp.Offer(nil), o.Offers...), o.ParentOffers...)
		target4, o.Parent4From = gateway4(n, o.HostGateway4, offers)
		if !target4.IsValid() && len(offers) > 0 {
			target4, o.Parent4From = offers[0].Server, "the DHCP server that answered (no gateway is known)"
		}
		if target4.IsValid() {
			o.Parent4, o.Child4, o.ChildErr = reach4(ctx, w, n, parentMAC, target4)
		}
	}
	reach.Wait()
	return o
}

// minListen is the least the collectors may listen for: with less, no
// answer is no evidence.
const minListen = time.Second

// reach4 asks for target from a throwaway child with a new MAC (macvlan),
// then from the parent: one after the other, since each probe's socket
// would take the other's probe for the target for an answer.
func reach4(ctx context.Context, w wire, n Network, parentMAC net.HardwareAddr, target netip.Addr) (parent, child Reach, childErr string) {
	switch {
	case n.Type == kernel.KindIpvlan:
	case n.Mode == kernel.MacvlanPassthru:
		// Passthru takes the parent for one link: a throwaway child
		// beside it could keep the network's first container from
		// starting. The new MAC goes out from the parent's socket.
		child = w.Probe4(ctx, n.Parent, lanmac.Random(), target)
		child.From += " (from " + n.Parent + "'s socket: passthru allows no second child)"
	default:
		var err error
		child, err = w.ChildProbe4(ctx, n.Parent, lanmac.Random(), target)
		childErr = errString(err)
	}
	parent = w.Probe4(ctx, n.Parent, parentMAC, target)
	parent.From = fmt.Sprintf("the parent %s (%s)", n.Parent, parentMAC)
	return parent, child, childErr
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// unusable says why nothing can be sent on the parent ("" when it can).
func unusable(name string, l LinkState) string {
	switch {
	case !l.Exists:
		return fmt.Sprintf("%s does not exist", name)
	case l.NotEthernet:
		return fmt.Sprintf("%s is not an Ethernet link", name)
	case l.Down:
		return fmt.Sprintf("%s is down", name)
	}
	return ""
}

// linkState is what the kernel says of the parent and a VLAN's base.
func linkState(ctx context.Context, k Kernel, name string, l kernel.Link, err error) LinkState {
	if err != nil {
		s := LinkState{Err: err.Error()}
		if base, vid, ok := kernel.SplitVLAN(name); ok && vid >= 1 && vid <= 4094 {
			s.BaseName, s.VLAN = base, vid
			bl, berr := k.Get(ctx, base)
			b := stateOf(bl, berr)
			s.Base = &b
		}
		return s
	}
	s := stateOf(l, nil)
	if l.Kind == "vlan" && l.ParentIndex > 0 {
		s.VLAN = l.VLAN
		bl, berr := k.LinkByIndex(ctx, l.ParentIndex)
		if berr == nil {
			bl, berr = k.Get(ctx, bl.Name) // with Wireless
		}
		b := stateOf(bl, berr)
		s.Base, s.BaseName = &b, bl.Name
	}
	return s
}

func stateOf(l kernel.Link, err error) LinkState {
	if err != nil {
		return LinkState{Err: err.Error()}
	}
	mac, err := net.ParseMAC(l.MAC)
	notEther := err != nil || len(mac) != 6 || (l.Encap != "" && l.Encap != "ether")
	return LinkState{Exists: true, Kind: l.Kind, Down: l.Down, NoCarrier: l.NoCarrier, Wireless: l.Wireless, MTU: l.MTU, NotEthernet: notEther, Encap: l.Encap}
}

// defaultGateways are the gateways of the main table's default routes
// (the lowest metric wins) among rs.
func defaultGateways(rs []kernel.Route) (v4, v6 netip.Addr) {
	best4, best6 := -1, -1
	for _, r := range rs {
		if !r.Default() || !r.Gateway.IsValid() || (r.Table != 0 && r.Table != kernel.MainTable) {
			continue
		}
		switch {
		case r.Gateway.Is4() && (best4 < 0 || r.Priority < best4):
			v4, best4 = r.Gateway, r.Priority
		case r.Gateway.Is6() && (best6 < 0 || r.Priority < best6):
			v6, best6 = r.Gateway, r.Priority
		}
	}
	return v4, v6
}

// gateway6 is the IPv6 address the reach check asks for: the network's
// gateway, else the host's default route's through the parent.
func gateway6(n Network, host netip.Addr) (netip.Addr, string) {
	switch {
	case n.Gateway6.IsValid():
		return n.Gateway6, "the network's IPv6 gateway"
	case host.IsValid():
		return host.WithZone(""), "the host's IPv6 default route's gateway through " + n.Parent
	}
	return netip.Addr{}, ""
}
