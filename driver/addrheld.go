package driver

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The holders a probe cannot see. The address probe asks the LAN, but two
// holders never answer it: the host itself (Linux does not answer its own
// outgoing probe, yet answers ARP for each of its addresses on every link)
// and the other endpoints of this daemon on the same parent (their links
// sit in other namespaces behind the same parent). So every path that
// gives an endpoint an address first asks who holds it: a static or
// IPAM-given address is refused (409) naming the holder, a DHCP or DHCPv6
// offer is declined. Neither check grows with the host: the host's is one
// route lookup (netlinkutil OwnAddr), the endpoints' one read of the
// store's address index per network on the parent.

// addrHolder is who holds an address an endpoint asks for.
type addrHolder struct {
	// host is the host's link that carries the address ("" with host set
	// when only a local route holds it).
	host     bool
	hostLink string
	// network and endpoint are another endpoint of this daemon's.
	network, endpoint string
}

func (h addrHolder) String() string {
	switch {
	case h.host && h.hostLink != "":
		return "this host holds it (on its link " + h.hostLink + ")"
	case h.host:
		return "this host holds it (a local route of its own, no link's address)"
	case h.endpoint != "":
		return fmt.Sprintf("endpoint %s of network %s holds it", dockerid.Short(h.endpoint), dockerid.Short(h.network))
	}
	return ""
}

// held reports whether anyone holds the address.
func (h addrHolder) held() bool { return h.host || h.endpoint != "" }

// addrHeld names who holds addr among the holders no probe sees: the host,
// or another endpoint (not ep) of this daemon on n's parent, whatever its
// network (static, DHCP, DHCPv6 or SLAAC).
func addrHeld(ctx context.Context, links netlinkutil.Links, st Store, n record.Network, ep record.Endpoint, addr netip.Addr) (addrHolder, error) {
	if n.Parent == config.DummyName(n.ID) {
		// An internal network's own dummy parent: no LAN, and the host's
		// addresses on its other links are not on it.
		return endpointHolding(st, n, ep, addr)
	}
	scope := 0
	if addr.Is6() && addr.IsLinkLocalUnicast() {
		p, err := links.Get(ctx, n.Parent)
		if err != nil {
			return addrHolder{}, fmt.Errorf("look up parent %s of network %s: %w", n.Parent, dockerid.Short(n.ID), err)
		}
		scope = p.Index
	}
	link, own, err := links.OwnAddr(ctx, addr, scope)
	if err != nil {
		return addrHolder{}, fmt.Errorf("is %s one of the host's addresses: %w", addr, err)
	}
	if own {
		return addrHolder{host: true, hostLink: link}, nil
	}
	return endpointHolding(st, n, ep, addr)
}

// endpointHolding names another endpoint (not ep) of this daemon on n's
// parent that holds addr: one read of the address index per network on
// the parent.
func endpointHolding(st Store, n record.Network, ep record.Endpoint, addr netip.Addr) (addrHolder, error) {
	var h addrHolder
	err := st.View(func(tx *store.Tx) error {
		nets, err := tx.NetworksOn(n.Parent)
		if err != nil {
			return err
		}
		for _, on := range nets {
			ids, err := tx.EndpointsWithAddr(on.ID, addr)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if id != ep.ID {
					h = addrHolder{network: on.ID, endpoint: id}
					return nil
				}
			}
		}
		return nil
	})
	return h, err
}

// claimAddrs claims the addresses an endpoint asks for (static, IPAM-given,
// or its SLAAC link-local one) on its parent and refuses one that another
// create in flight claims or that the host or another endpoint of this
// daemon holds, naming the holder (an error wrapping ErrConflict). unclaim
// ends the claims; call it once the endpoint is recorded, or not.
func claimAddrs(ctx context.Context, links netlinkutil.Links, st Store, claims *lan.Claims, n record.Network, ep record.Endpoint, addrs []netip.Addr) (unclaim func(), err error) {
	var taken []netip.Addr
	unclaim = func() {
		for _, a := range taken {
			claims.Release(n.Parent, a, ep.ID)
		}
	}
	for _, a := range addrs {
		flag := "run the container with another --ip"
		if a.Is6() {
			flag = "run the container with another --ip6"
		}
		if a.Is6() && a.IsLinkLocalUnicast() {
			flag = "give the container another MAC (--mac-address): its link-local address is formed from it"
		}
		if !claims.Claim(n.Parent, a, ep.ID) {
			unclaim()
			return func() {}, fmt.Errorf("%w: endpoint %s of network %s asks for %s, which another endpoint being created on parent %s asks for or was offered at the same time: %s", pluginapi.ErrConflict, dockerid.Short(ep.ID), dockerid.Short(n.ID), a, n.Parent, flag)
		}
		taken = append(taken, a)
		h, err := addrHeld(ctx, links, st, n, ep, a)
		if err != nil {
			unclaim()
			return func() {}, err
		}
		if !h.held() {
			continue
		}
		unclaim()
		fix := fmt.Sprintf("%s, or keep %s out of Docker's addresses with --aux-address host=%s (docker network create)", flag, a, a)
		if h.endpoint != "" {
			fix = fmt.Sprintf("%s, keep %s out of Docker's addresses with --aux-address or --ip-range (docker network create), or remove the container of endpoint %s first", flag, a, dockerid.Short(h.endpoint))
		}
		if a.Is6() && a.IsLinkLocalUnicast() {
			fix = flag
		}
		return func() {}, fmt.Errorf("%w: endpoint %s of network %s asks for %s on parent %s, but %s, and no probe can see that holder: %s", pluginapi.ErrConflict, dockerid.Short(ep.ID), dockerid.Short(n.ID), a, n.Parent, h, fix)
	}
	return unclaim, nil
}

// staticAddrs is the address source of the addresses an endpoint comes
// with (Docker's or underlay's IPAM, or --ip/--ip6): each is claimed and
// refused when another holds it (claimAddrs), and a new endpoint's are
// probed on the LAN. On a DHCP network the IPv4 address is the server's:
// one given is refused.
func (d *Driver) staticAddrs(ctx context.Context, n record.Network, ep *record.Endpoint, existing *record.Endpoint) (grant, error) {
	if n.Config.DHCP.On && ep.IPv4 != "" {
		return grant{}, config.Invalidf("endpoint %s of DHCP network %s comes with address %s: the LAN's DHCP server gives the addresses; create the network with --ipam-driver null and run containers without --ip", dockerid.Short(ep.ID), dockerid.Short(n.ID), ep.IPv4)
	}
	unclaim, err := claimAddrs(ctx, d.links, d.store, &d.claims, n, *ep, plan.EndpointAddrs(*ep))
	if err != nil {
		return grant{}, err
	}
	if !n.Config.DHCP.On && existing == nil {
		if err := d.lan.ProbeStatic(ctx, n, *ep); err != nil {
			return grant{unclaim: unclaim}, err
		}
	}
	return grant{unclaim: unclaim}, nil
}
