package doctor

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store/record"
)

// Owned links that exist but are broken (an operator set one down, flushed
// a host link's address, changed an MTU), and DHCP leases an endpoint lost.

const (
	// OpHeal puts an owned link back in order.
	OpHeal Op = "heal-link"

	kindBroken    = "broken-link"
	kindLostLease = "lost-lease"
)

// broken finds the owned parent links and host links that exist with this
// daemon's mark but are down, without the host address, or with another
// MTU than underlay gave them.
func broken(in Input) []Finding {
	want := map[string]struct {
		mtu  int
		addr netip.Addr
		what string
	}{}
	used := map[string]bool{} // parents a network needs (only those are healed)
	for _, n := range in.Networks {
		used[n.Parent] = true
	}
	for _, p := range in.Owned {
		if used[p.Name] {
			used[p.Base] = true // a VLAN on a VLAN
		}
	}
	for _, p := range in.Owned {
		if !used[p.Name] {
			continue // the janitor releases it; the daemon heals only what networks need
		}
		want[p.Name] = struct {
			mtu  int
			addr netip.Addr
			what string
		}{p.MTU, netip.Addr{}, "parent link " + p.Name + ", which underlay created,"}
	}
	for _, n := range in.Networks {
		name, ok := in.HostLinks[n.ID]
		if !ok || n.Pending != nil {
			continue
		}
		a, _ := netip.ParseAddr(n.HostAddress)
		want[name] = struct {
			mtu  int
			addr netip.Addr
			what string
		}{n.MTU, a, fmt.Sprintf("host link %s of network %s", name, dockerid.Short(n.ID))}
	}
	var out []Finding
	for _, l := range in.Links {
		w, ok := want[l.Name]
		if !ok || in.Mark == "" || l.Alias != in.Mark {
			continue
		}
		var why []string
		if l.Down {
			why = append(why, "is down")
		}
		if w.addr.IsValid() && in.HostLinkAddrs != nil && !slices.Contains(in.HostLinkAddrs[l.Name], w.addr) {
			why = append(why, "lost its address "+w.addr.String())
		}
		if w.mtu > 0 && l.MTU != w.mtu {
			why = append(why, fmt.Sprintf("has MTU %d, not %d", l.MTU, w.mtu))
		}
		if len(why) == 0 {
			continue
		}
		out = append(out, Finding{Kind: kindBroken, Subject: l.Name,
			Message: fmt.Sprintf("%s %s: its containers (or the host) lose their network", w.what, strings.Join(why, ", ")),
			Repair:  "put it back in order (set it up, its address, its MTU); the daemon also does this on its own at each change it sees",
			Action:  &Action{Op: OpHeal, Link: l.Name}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out
}

// lostLeases are the DHCP and DHCPv6 leases endpoints lost: their
// addresses are blocked until the server gives them back. Both are
// lost-lease findings about the endpoint (a dual-stack endpoint may have
// two, each naming its family and address).
func lostLeases(in Input) []Finding {
	var out []Finding
	for _, ep := range in.Endpoints {
		if ep.Lease == nil || ep.Lease.State(in.Now) != record.LeaseLost {
			continue
		}
		since, why := ep.Lease.Lost, ep.Lease.LostWhy
		if since.IsZero() {
			since, why = ep.Lease.Expiry, "it expired while the daemon was not running"
		}
		out = append(out, Finding{Kind: kindLostLease, Subject: ep.ID,
			Message: fmt.Sprintf("endpoint %s of network %s lost its DHCP lease of %s at %s (%s): the container cannot send from that address until the LAN's server gives it back",
				dockerid.Short(ep.ID), dockerid.Short(ep.NetworkID), ep.Lease.Addr, since.Format(time.RFC3339), why),
			Repair: "none by underlay (it keeps asking the server for that address): free the address on the DHCP server, or restart the container (docker restart) to get a new address"})
	}
	for _, ep := range in.Endpoints {
		l := ep.Lease6
		if l == nil || l.State(in.Now) != record.LeaseLost {
			continue
		}
		since, why := l.Lost, l.LostWhy
		if since.IsZero() {
			since, why = l.Expiry(), "it expired while the daemon was not running"
		}
		out = append(out, Finding{Kind: kindLostLease, Subject: ep.ID,
			Message: fmt.Sprintf("endpoint %s of network %s lost its DHCPv6 lease of %s (DUID %s, IAID %s) at %s (%s): the container cannot send from that address (blocked on the parent) until the LAN's server gives it back",
				dockerid.Short(ep.ID), dockerid.Short(ep.NetworkID), l.Addr, l.DUID, l.IAID, since.Format(time.RFC3339), why),
			Repair: "none by underlay (it asks the server for that address every 30 s): free the address on the DHCPv6 server (its binding for that DUID and IAID), or restart the container (docker restart) to get a new address"})
	}
	return out
}
