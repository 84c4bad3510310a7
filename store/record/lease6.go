package record

import "time"

// Lease6 is a DHCPv6 address (IA_NA) underlay holds for an endpoint of a
// network with ipv6_mode=dhcpv6. Like Lease it is part of the endpoint's
// record. Durations count from Acquired; Infinite6 is "forever".
type Lease6 struct {
	// Addr is the leased address (no prefix length: DHCPv6 gives none).
	Addr string `json:"addr"`
	// DUID and IAID (hex) are the client identity the lease was taken
	// with; renewals and the release present the same ones.
	DUID string `json:"duid"`
	IAID string `json:"iaid"`
	// Hostname is option 39's name as sent (the container's name on a
	// DHCPv6 pool of underlay's IPAM); empty for none.
	Hostname string `json:"hostname,omitempty"`
	// ServerID (hex) is the DUID of the server that granted the lease.
	ServerID string `json:"server"`
	// Acquired is when the exchange that granted the lease began.
	Acquired time.Time `json:"acquired"`
	// T1, T2, Preferred and Valid are the lease's times after Acquired.
	T1        time.Duration `json:"t1"`
	T2        time.Duration `json:"t2"`
	Preferred time.Duration `json:"preferred"`
	Valid     time.Duration `json:"valid"`
	// Lost is when the lease was lost (expired without a renewal, or the
	// server no longer holds it); zero while it is held.
	Lost    time.Time `json:"lost,omitzero"`
	LostWhy string    `json:"lost_why,omitempty"`
}

// Infinite6 is a DHCPv6 lifetime of 0xffffffff, "forever".
const Infinite6 = time.Duration(1<<63 - 1)

// Expiry is when the lease ends without a renewal; zero for never.
func (l Lease6) Expiry() time.Time {
	if l.Valid == Infinite6 {
		return time.Time{}
	}
	return l.Acquired.Add(l.Valid)
}

// At is the time d after Acquired; zero for Infinite6 ("never").
func (l Lease6) At(d time.Duration) time.Time {
	if d == Infinite6 {
		return time.Time{}
	}
	return l.Acquired.Add(d)
}

// State is what the lease is at now, in Lease's states: bound until T1,
// renewing until T2, rebinding until the valid lifetime's end, lost once
// marked lost or past that end (the daemon may not have marked it yet:
// it was down). An infinite time is never reached.
func (l Lease6) State(now time.Time) string {
	reached := func(d time.Duration) bool { t := l.At(d); return !t.IsZero() && !now.Before(t) }
	switch {
	case !l.Lost.IsZero() || reached(l.Valid):
		return LeaseLost
	case !reached(l.T1):
		return LeaseBound
	case !reached(l.T2):
		return LeaseRenewing
	}
	return LeaseRebinding
}
