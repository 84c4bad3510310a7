package rules

import (
	"github.com/underlay-net/underlay/netlinkutil/vocab"
	"github.com/underlay-net/underlay/store/record"
)

const (

	// maxDeclines bounds the offers a CreateEndpoint declines.
	MaxDeclines = 3
)

// Docker's own option names and ranges for announcements.
const (
	OptAdvertiseNMsgs = "com.docker.network.advertise_addr_nmsgs"
	OptAdvertiseMs    = "com.docker.network.advertise_addr_ms"
	LabelEnableIPv4   = "com.docker.network.enable_ipv4"
)

// Announcing says whether and how a joined endpoint is announced by
// underlay: not where the engine does, not on internal networks nor
// ipvlan l3/l3s, not when the network asks for none.
func Announcing(n record.Network) (record.Announce, bool) {
	c := n.Config.Announce
	if n.EngineAnnounces || n.Internal || c.Count == 0 || (n.Type == vocab.KindIpvlan && n.Mode != vocab.IpvlanL2) {
		return c, false
	}
	return c, true
}
