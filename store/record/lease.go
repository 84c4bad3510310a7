package record

import "time"

// Lease is a DHCPv4 lease underlay holds for an endpoint of a network with
// dhcp=true: what the LAN's server gave and when it must be renewed. It is
// part of the endpoint's record, so it is as durable as the endpoint.
type Lease struct {
	// Addr is the leased address with the subnet's prefix length.
	Addr string `json:"addr"`
	// Router is option 3's first router; empty when the server gave none.
	Router string `json:"router,omitempty"`
	// Routes are option 121's classless static routes.
	Routes []LeaseRoute `json:"routes,omitempty"`
	// ServerID is option 54: the server that gave the lease.
	ServerID string `json:"server,omitempty"`
	// ClientID is option 61 as sent (hex), for ipvlan endpoints, which
	// share the parent's MAC.
	ClientID string `json:"client_id,omitempty"`
	// Hostname is option 12 as sent (the container's name on a DHCP pool
	// of underlay's IPAM); empty for none.
	Hostname string `json:"hostname,omitempty"`
	// FQDN: Hostname went in option 81 too.
	FQDN bool `json:"fqdn,omitempty"`
	// Acquired is when the server acknowledged the lease; T1 and T2 are
	// when to renew and rebind, Expiry when it ends without a renewal.
	Acquired time.Time `json:"acquired"`
	T1       time.Time `json:"t1"`
	T2       time.Time `json:"t2"`
	Expiry   time.Time `json:"expiry"`
	// Lost is when the lease was lost (it expired without a renewal, or the
	// server refused it): from then on the container must not send from
	// the address until it is won back. Zero while it is held.
	Lost time.Time `json:"lost,omitzero"`
	// LostWhy says how it was lost.
	LostWhy string `json:"lost_why,omitempty"`
}

// LeaseRoute is one classless static route (option 121).
type LeaseRoute struct {
	Dst     string `json:"dst"`
	Gateway string `json:"gateway"`
}

// Lease states, as metrics, underlay ls and doctor show them.
const (
	LeaseBound     = "bound"
	LeaseRenewing  = "renewing"
	LeaseRebinding = "rebinding"
	LeaseLost      = "lost"
)

// LeaseStates lists the states in the order they are shown.
var LeaseStates = []string{LeaseBound, LeaseRenewing, LeaseRebinding, LeaseLost}

// State is what the lease is at now: bound until T1, renewing until T2,
// rebinding until the expiry, lost once marked lost or past its expiry
// (the daemon may not have marked it yet: it was down).
func (l Lease) State(now time.Time) string {
	switch {
	case !l.Lost.IsZero() || !now.Before(l.Expiry):
		return LeaseLost
	case now.Before(l.T1):
		return LeaseBound
	case now.Before(l.T2):
		return LeaseRenewing
	}
	return LeaseRebinding
}

// Durations are T1, T2 and the lease time as spans from Acquired, the form
// the dhcp package plans with.
func (l Lease) Durations() (t1, t2, leaseTime time.Duration) {
	return l.T1.Sub(l.Acquired), l.T2.Sub(l.Acquired), l.Expiry.Sub(l.Acquired)
}
