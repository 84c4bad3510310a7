// Package leasetime says when a lease is renewed, rebound and lost: the
// T1/T2/retry schedule that DHCPv4 (RFC 2131 section 4.4.5) and DHCPv6
// (RFC 8415 sections 18.2.4 and 18.2.5) share, written once. Packages
// dhcp and dhcp6 read their leases' times into it (each with its own
// defaults for a missing T1 or T2) and keep their Plan, Schedule and
// Phase as the API the driver uses. It is a leaf: it imports nothing of
// the project, and is small because both protocol packages need it and
// neither may import the other.
package leasetime

import "time"

// Phase is where a lease stands at a moment.
type Phase int

const (
	// Bound: before T1; nothing to do until RenewAt.
	Bound Phase = iota
	// Renewing: between T1 and T2; renew with the server that granted
	// the lease.
	Renewing
	// Rebinding: between T2 and the expiry; renew with any server.
	Rebinding
	// Expired: the address is no longer the endpoint's; acquire anew.
	Expired
)

func (p Phase) String() string {
	switch p {
	case Bound:
		return "bound"
	case Renewing:
		return "renewing"
	case Rebinding:
		return "rebinding"
	case Expired:
		return "expired"
	}
	return "unknown"
}

const (
	// Infinite is a time that never comes: a lease time, lifetime, T1 or
	// T2 of 0xffffffff seconds (forever, in both protocols).
	Infinite = time.Duration(1<<63 - 1)
	// MinRetry is the shortest wait between two attempts in one phase,
	// unless the phase ends sooner. RFC 2131 section 4.4.5 says 60
	// seconds and RFC 8415's REN_TIMEOUT is 10 s; 10 s leaves a 2-minute
	// DHCPv4 lease (dnsmasq's shortest: renewing from 60 s, rebinding from
	// 105 s) more than one attempt per phase, and an endpoint that loses
	// its lease cannot be given another address (Docker cannot be told).
	MinRetry = 10 * time.Second
	// MinRetryShort is the shortest wait between two attempts in a phase
	// of less than 2×MinRetry left: retries still come before the phase
	// ends (in a short rebinding phase, before the lease expires), at most
	// one a second.
	MinRetryShort = time.Second
)

// Schedule is what a lease calls for at a moment.
type Schedule struct {
	Phase Phase
	// RenewAt, RebindAt and ExpiresAt are the acquisition plus T1, T2
	// and the lease's end; each is zero when Infinite.
	RenewAt, RebindAt, ExpiresAt time.Time
	// Next is when to act next: RenewAt while bound; while renewing or
	// rebinding half the time left in the phase (at least MinRetry, or
	// MinRetryShort when MinRetry would reach the phase's end; at most the
	// phase's end; MinRetry from now when the phase never ends), for a
	// retry after a failed attempt; now once expired; zero when nothing is
	// ever due.
	Next time.Time
}

// Plan says what a lease acquired at acquired, with T1 t1, T2 t2 and an
// end (lease time, valid lifetime) end after it, calls for at now. Any
// of them may be Infinite. The caller gives t1 ≤ t2 ≤ end (its
// protocol's defaults fill a missing one).
func Plan(acquired time.Time, t1, t2, end time.Duration, now time.Time) Schedule {
	at := func(d time.Duration) time.Time {
		if d == Infinite {
			return time.Time{}
		}
		return acquired.Add(d)
	}
	s := Schedule{RenewAt: at(t1), RebindAt: at(t2), ExpiresAt: at(end)}
	switch {
	case end != Infinite && !now.Before(s.ExpiresAt):
		s.Phase, s.Next = Expired, now
	case t2 != Infinite && !now.Before(s.RebindAt):
		s.Phase, s.Next = Rebinding, retryAt(now, s.ExpiresAt)
	case t1 != Infinite && !now.Before(s.RenewAt):
		s.Phase, s.Next = Renewing, retryAt(now, s.RebindAt)
	default:
		s.Phase, s.Next = Bound, s.RenewAt
	}
	return s
}

// retryAt is half the time from now to end, at least MinRetry, or at
// least MinRetryShort when MinRetry would reach end; end itself when the
// retry would come less than MinRetryShort before it (so that attempts
// are at least that far apart across the phases too). With no end (the
// zero Time: infinite), MinRetry from now.
func retryAt(now, end time.Time) time.Time {
	if end.IsZero() {
		return now.Add(MinRetry)
	}
	left := end.Sub(now)
	wait := max(left/2, MinRetry)
	if wait >= left {
		wait = max(left/2, MinRetryShort)
	}
	if left-wait < MinRetryShort {
		return end
	}
	return now.Add(wait)
}
