package plan

import (
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/store/record"
)

// BlockKey is an address blocked on a parent.
type BlockKey struct {
	Parent string
	Addr   netip.Addr
}

// PlanBlocks says which blocks to add and remove so that exactly the lost
// leases' addresses are blocked (present: this instance's blocks).
func PlanBlocks(lost, present []BlockKey) (add, remove []BlockKey) {
	want := map[BlockKey]bool{}
	for _, k := range lost {
		want[k] = true
	}
	have := map[BlockKey]bool{}
	for _, k := range present {
		have[k] = true
		if !want[k] {
			remove = append(remove, k)
		}
	}
	for _, k := range lost {
		if !have[k] {
			add = append(add, k)
			have[k] = true
		}
	}
	return add, remove
}

// MarkLost is a lease marked lost at now.
func MarkLost(l record.Lease, now time.Time, why string) record.Lease {
	if l.Lost.IsZero() {
		l.Lost, l.LostWhy = now, why
	}
	return l
}

// LostBlocks are the blocks an endpoint's lost leases need: its DHCP
// lease's address on a DHCP network, its DHCPv6 lease's on an
// ipv6_mode=dhcpv6 network, each on the network's parent. The blocks of
// both families live in one table per instance, so the start's
// PlanBlocks is given both.
func LostBlocks(n record.Network, ep record.Endpoint) []BlockKey {
	var out []BlockKey
	if l := ep.Lease; l != nil && !l.Lost.IsZero() && n.Config.DHCP.Leases() {
		if p, err := netip.ParsePrefix(l.Addr); err == nil {
			out = append(out, BlockKey{Parent: n.Parent, Addr: p.Addr()})
		}
	}
	if l := ep.Lease6; l != nil && !l.Lost.IsZero() && config.Leases6(n.Config) {
		if a, err := netip.ParseAddr(l.Addr); err == nil {
			out = append(out, BlockKey{Parent: n.Parent, Addr: a})
		}
	}
	return out
}
