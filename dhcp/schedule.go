package dhcp

import "time"

// Phase is where a lease stands at a moment (RFC 2131 section 4.4.5).
type Phase int

const (
	// Bound: before T1; nothing to do until RenewAt.
	Bound Phase = iota
	// Renewing: between T1 and T2; renew with the server that granted
	// the lease (Renew sends its server identifier).
	Renewing
	// Rebinding: between T2 and the expiry; renew with any server (Renew
	// leaves the server identifier out).
	Rebinding
	// Expired: the address is no longer the endpoint's; Acquire anew.
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

// MinRetry is the shortest wait between two renewal attempts in the same
// phase, unless the phase ends sooner. RFC 2131 section 4.4.5 says 60
// seconds; that leaves a 2-minute lease (dnsmasq's shortest: renewing
// from 60 s, rebinding from 105 s) one attempt per phase, and an endpoint
// that loses its lease cannot be given another address (Docker cannot be
// told), so retries come sooner.
const MinRetry = 10 * time.Second

// MinRetryShort is the shortest wait between two attempts in a phase of
// less than 2×MinRetry left: retries still come before the phase ends
// (in a short rebinding phase, before the lease expires), at most one a
// second.
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
	l.T1 = min(l.T1, l.T2)
	s := Schedule{
		RenewAt:   l.Acquired.Add(l.T1),
		RebindAt:  l.Acquired.Add(l.T2),
		ExpiresAt: l.Acquired.Add(l.LeaseTime),
	}
	switch {
	case !now.Before(s.ExpiresAt):
		s.Phase, s.Next = Expired, now
	case !now.Before(s.RebindAt):
		s.Phase, s.Next = Rebinding, retryAt(now, s.ExpiresAt)
	case !now.Before(s.RenewAt):
		s.Phase, s.Next = Renewing, retryAt(now, s.RebindAt)
	default:
		s.Phase, s.Next = Bound, s.RenewAt
	}
	return s
}

// retryAt is half the time from now to end, at least MinRetry, or at
// least MinRetryShort when MinRetry would reach end; end itself when the
// retry would come less than MinRetryShort before it (so that attempts
// are at least that far apart across the phases too).
func retryAt(now, end time.Time) time.Time {
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
