package dhcp

import (
	"time"

	"github.com/underlay-net/underlay/internal/leasetime"
)

// Phase is where a lease stands at a moment (RFC 2131 section 4.4.5):
//   - Bound: before T1; nothing to do until RenewAt.
//   - Renewing: between T1 and T2; renew with the server that granted
//     the lease (Renew sends its server identifier).
//   - Rebinding: between T2 and the expiry; renew with any server (Renew
//     leaves the server identifier out).
//   - Expired: the address is no longer the endpoint's; Acquire anew.
//
// The schedule is package leasetime's, which DHCPv6 shares; the phases
// are numbered as there.
type Phase int

// The phases, in the order a lease goes through them.
const Bound, Renewing, Rebinding, Expired = Phase(leasetime.Bound), Phase(leasetime.Renewing), Phase(leasetime.Rebinding), Phase(leasetime.Expired)

func (p Phase) String() string { return leasetime.Phase(p).String() }

// MinRetry is the shortest wait between two renewal attempts in the same
// phase, unless the phase ends sooner: leasetime.MinRetry. RFC 2131
// section 4.4.5 says 60 seconds; that leaves a 2-minute lease (dnsmasq's
// shortest: renewing from 60 s, rebinding from 105 s) one attempt per
// phase, and an endpoint that loses its lease cannot be given another
// address (Docker cannot be told), so retries come sooner.
const MinRetry = 10 * time.Second

// MinRetryShort is the shortest wait between two attempts in a phase of
// less than 2×MinRetry left (leasetime.MinRetryShort).
const MinRetryShort = time.Second

// Schedule is what a lease calls for at a moment.
type Schedule struct {
	Phase Phase
	// RenewAt, RebindAt and ExpiresAt are Acquired plus T1, T2 and the
	// lease time; zero for a lease granted forever.
	RenewAt, RebindAt, ExpiresAt time.Time
	// Next is when to act next: RenewAt while bound; while renewing or
	// rebinding half the time left in the phase (at least MinRetry, or
	// MinRetryShort when MinRetry would reach the phase's end; at most the
	// phase's end), for a retry after a failed attempt; now once expired;
	// zero for a lease forever.
	Next time.Time
}

// Plan says what a lease calls for at now. A scheduler sleeps until Next
// while Bound; when Renewing or Rebinding it calls Renew, and if that
// fails (no answer) keeps the lease and sleeps until Next; when Expired
// it acquires anew (asking for the same address). After each step it
// plans again with the lease it then holds: a renewed lease is Bound.
//
// A T1 or T2 that is not positive or not before the expiry (a record
// made before leaseFromACK ignored such options) counts as its default,
// half and 7/8 of the lease time, and a T1 after T2 as T2.
func Plan(l Lease, now time.Time) Schedule {
	if l.LeaseTime == Infinite {
		return Schedule{Phase: Bound}
	}
	if l.T1 <= 0 || l.T1 >= l.LeaseTime {
		l.T1 = l.LeaseTime / 2
	}
	if l.T2 <= 0 || l.T2 >= l.LeaseTime {
		l.T2 = l.LeaseTime / 8 * 7
	}
	t := leasetime.Plan(l.Acquired, min(l.T1, l.T2), l.T2, l.LeaseTime, now)
	return Schedule{Phase: Phase(t.Phase), RenewAt: t.RenewAt, RebindAt: t.RebindAt, ExpiresAt: t.ExpiresAt, Next: t.Next}
}
