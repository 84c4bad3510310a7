package driver

import (
	"context"

	"github.com/underlay-net/underlay/driver/internal/rules"
	"github.com/underlay-net/underlay/store"
)

// The MAC policy (mac_address_policy) and the stable MAC's derivation are
// rules (driver/internal/rules/macpolicy.go); reading the parent and its
// links for them is done here.

// endpointMAC chooses the MAC of a macvlan endpoint Docker gave none: the
// one it had when Docker asks again, else the policy's.
func (d *Driver) endpointMAC(ctx context.Context, n store.Network, ep store.Endpoint, existing *store.Endpoint) string {
	if existing != nil && existing.MAC != "" {
		return existing.MAC
	}
	policy, err := rules.ParseMacPolicy(n.Options, n.Type)
	addr := rules.FirstAddr(ep)
	if err != nil || policy == rules.MacRandom || !addr.IsValid() || rules.DHCPOf(n).On {
		return randomMAC().String()
	}
	p, err := d.links.Get(ctx, n.Parent)
	if err != nil {
		d.log.Warn("using a random MAC: the parent could not be read for a stable one", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return randomMAC().String()
	}
	links, err := d.links.List(ctx)
	if err != nil {
		d.log.Warn("using a random MAC: the links could not be listed to check a stable one is free", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return randomMAC().String()
	}
	base := rules.MACBase(p, links)
	if base == nil {
		return randomMAC().String()
	}
	mac := rules.StableMAC(base, p.VLAN, addr).String()
	if rules.MACTaken(p, links, mac) {
		d.log.Warn("using a random MAC: the stable MAC for the endpoint's address is already in use on the parent", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "address", addr, "mac", mac)
		return randomMAC().String()
	}
	return mac
}
