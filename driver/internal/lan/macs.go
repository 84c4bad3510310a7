package lan

import (
	"context"
	"errors"
	"log/slog"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Chooser chooses endpoints' MACs.
type Chooser struct {
	Links netlinkutil.Links
	Log   *slog.Logger
}

// Choose chooses the MAC of a macvlan endpoint Docker gave none: the one
// it had when Docker asks again, else the policy's.
func (c *Chooser) Choose(ctx context.Context, n record.Network, ep record.Endpoint, existing *record.Endpoint) string {
	if existing != nil && existing.MAC != "" {
		return existing.MAC
	}
	addr := plan.FirstAddr(ep)
	if n.Config.MACPolicy != config.MacStable || !addr.IsValid() || n.Config.DHCP.On {
		return lanmac.Random().String()
	}
	p, err := c.Links.LinkByName(ctx, n.Parent)
	if err != nil {
		c.Log.Warn("using a random MAC: the parent could not be read for a stable one", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return lanmac.Random().String()
	}
	// The links MACBase and MACTaken look at: a VLAN's lower link, and
	// the links on the parent.
	links, err := c.Links.LinksOn(ctx, p.Index)
	if err == nil && p.Kind == kernel.KindVLAN && p.ParentIndex != 0 {
		var lower kernel.Link
		if lower, err = c.Links.LinkByIndex(ctx, p.ParentIndex); err == nil {
			links = append(links, lower)
		} else if errors.Is(err, netlinkutil.ErrNotFound) {
			err = nil // in another namespace: the VLAN's own MAC is the base
		}
	}
	if err != nil {
		c.Log.Warn("using a random MAC: the links on the parent could not be read to check a stable one is free", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "error", err)
		return lanmac.Random().String()
	}
	base := lanmac.MACBase(p, links)
	if base == nil {
		return lanmac.Random().String()
	}
	mac := lanmac.StableMAC(base, p.VLAN, addr).String()
	if lanmac.MACTaken(p, links, mac) {
		c.Log.Warn("using a random MAC: the stable MAC for the endpoint's address is already in use on the parent", "network", n.ID, "endpoint", ep.ID, "parent", n.Parent, "address", addr, "mac", mac)
		return lanmac.Random().String()
	}
	return mac
}
