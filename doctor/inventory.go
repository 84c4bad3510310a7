package doctor

import (
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Inventory is the driver's state as the operator sees it: what the
// daemon answers underlay ls and doctor with (driver.Driver.Inventory).
type Inventory struct {
	Now  time.Time `json:"now"`
	Boot string    `json:"boot"`
	// Mark is the alias on the links this state file made.
	Mark string `json:"mark"`
	// Grace is how old a network must be before Docker's 404 is believed;
	// PoolGrace how old a pool must be before it can be unused
	// (CreateWindow). Both in nanoseconds.
	Grace     time.Duration       `json:"grace_ns"`
	PoolGrace time.Duration       `json:"pool_grace_ns"`
	Networks  []record.Network    `json:"networks"`
	Endpoints []record.Endpoint   `json:"endpoints"`
	Owned     []record.ParentLink `json:"owned_parents"`
	// Use counts the networks on each parent link.
	Use map[string]int `json:"parent_use"`
	// Links are the kernel's links in the daemon's namespace.
	Links []kernel.Link `json:"links"`
	// HostLinks are the host links of networks with a host address, by
	// network ID.
	HostLinks map[string]string `json:"host_links"`
	// HostLinkAddrs are the addresses the kernel shows on the host links
	// that exist, by link name.
	HostLinkAddrs map[string][]netip.Addr `json:"host_link_addrs,omitempty"`
	// LAN are the items of the latest LAN preflight the daemon ran in the
	// background after each network's create, by network ID (networks
	// without a finished one are absent).
	LAN map[string][]lancheck.Item `json:"lan_checks,omitempty"`
}
