package dhcp6

import (
	"time"

	"github.com/underlay-net/underlay/internal/leasetime"
)

// Plan says what a lease calls for at now. A scheduler sleeps until Next
// while Bound; calls Renew while Renewing and Rebind while Rebinding,
// keeping the lease and sleeping until Next when that gets no answer;
// and Acquires anew once Expired. An error wrapping ErrNoBinding means
// the server no longer holds the lease: Acquire anew at once. Retries
// come leasetime.MinRetry apart (RFC 8415's REN_TIMEOUT), or
// leasetime.MinRetryShort in a short phase.
//
// A record with T1 or T2 of 0 or not before the expiry (leaseFrom never
// makes one) is planned as leaseFrom would have fixed it.
func Plan(l Lease, now time.Time) Schedule {
	t1, t2, _ := times(l.T1, l.T2, l.Preferred, l.Valid)
	s := leasetime.Plan(l.Acquired, t1, t2, l.Valid, now)
	var deprecated time.Time
	if l.Preferred != Infinite {
		deprecated = l.Acquired.Add(l.Preferred)
	}
	return Schedule{Phase(s.Phase), s.RenewAt, s.RebindAt, deprecated, s.ExpiresAt, s.Next}
}

// Schedule is what a lease calls for at a moment.
type Schedule struct {
	Phase Phase
	// RenewAt, RebindAt, DeprecatedAt and ExpiresAt are Acquired plus
	// T1, T2, the preferred and the valid lifetime; zero when infinite.
	RenewAt, RebindAt, DeprecatedAt, ExpiresAt time.Time
	// Next is when to act next: RenewAt while bound; while renewing or
	// rebinding, half the time left in the phase (at least
	// leasetime.MinRetry, or leasetime.MinRetryShort when MinRetry would
	// reach the phase's end; at most the phase's end), for a retry after a
	// failed attempt; now once expired; zero when nothing is ever due.
	Next time.Time
}

// Phase is where a lease stands at a moment (RFC 8415 sections 18.2.4
// and 18.2.5):
//   - Bound: before T1; nothing to do until RenewAt.
//   - Renewing: between T1 and T2; Renew with the server that granted
//     the lease.
//   - Rebinding: between T2 and the end of the valid lifetime; Rebind
//     with any server.
//   - Expired: the address is no longer the endpoint's; stop using it
//     and Acquire anew (Request.Hint the old address).
//
// The schedule is package leasetime's, which DHCPv4 shares; the phases
// are numbered as there.
type Phase int

func (p Phase) String() string { return leasetime.Phase(p).String() }

// The phases, in the order a lease goes through them.
const Bound, Renewing, Rebinding, Expired = Phase(leasetime.Bound), Phase(leasetime.Renewing), Phase(leasetime.Rebinding), Phase(leasetime.Expired)
