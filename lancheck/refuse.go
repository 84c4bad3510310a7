package lancheck

import (
	"fmt"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// Refuse is the check that is certain and cheap enough to refuse a
// network's create with: macvlan on a Wi-Fi parent, which an access point
// will not carry (it drops frames from MACs that did not associate),
// unless the user said they know better (allow_wireless=true). parent is
// the link as Get returned it.
func Refuse(n Network, parent kernel.Link) error {
	if !parent.Wireless || n.Type == kernel.KindIpvlan || n.AllowWireless {
		return nil
	}
	return fmt.Errorf("parent %s is a wireless (802.11) link: an access point drops frames from MAC addresses that did not associate with it, so macvlan containers on it cannot reach the LAN; "+
		"use -o type=ipvlan -o ipvlan_mode=l2 (the containers share %s's MAC; DHCP then tells them apart by client ID), "+
		"or add -o allow_wireless=true if this access point or driver is known to carry them", parent.Name, parent.Name)
}
