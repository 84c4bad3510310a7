package dhcp6

import "time"

// Phase is where a lease stands at a moment (RFC 8415 section 18.2.4-5).
type Phase int

const (
	// Bound: before T1; nothing to do until RenewAt.
	Bound Phase = iota
	// Renewing: between T1 and T2; Renew with the server that granted
	// the lease.
	Renewing
	// Rebinding: between T2 and the end of the valid lifetime; Rebind
	// with any server.
	Rebinding
	// Expired: the address is no longer the endpoint's; stop using it
	// and Acquire anew (Request.Hint the old address).
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

// MinRetry is the shortest wait between two attempts in one phase,
// unless the phase ends sooner: RFC 8415's REN_TIMEOUT, 10 s.
const MinRetry = 10 * time.Second

// MinRetryShort is the shortest wait between two attempts in a phase of
// less than 2×MinRetry left, so that retries still come before it ends.
const MinRetryShort = time.Second

// Schedule is what a lease calls for at a moment.
type Schedule struct {
	Phase Phase
	// RenewAt, RebindAt, DeprecatedAt and ExpiresAt are Acquired plus
	// T1, T2, the preferred and the valid lifetime; zero when infinite.
	RenewAt, RebindAt, DeprecatedAt, ExpiresAt time.Time
	// Next is when to act next: RenewAt while bound; while renewing or
	// rebinding, half the time left in the phase (at least MinRetry, or
	// MinRetryShort when MinRetry would reach the phase's end; at most the
	// phase's end), for a retry after a failed attempt; now once expired;
	// zero when nothing is ever due.
	Next time.Time
}

// Plan says what a lease calls for at now. A scheduler sleeps until Next
// while Bound; calls Renew while Renewing and Rebind while Rebinding,
// keeping the lease and sleeping until Next when that gets no answer;
// and Acquires anew once Expired. An error wrapping ErrNoBinding means
// the server no longer holds the lease: Acquire anew at once.
//
// A record with T1 or T2 of 0 or not before the expiry (leaseFrom never
// makes one) is planned as leaseFrom would have fixed it.
func Plan(l Lease, now time.Time) Schedule {
	t1, t2, _ := times(l.T1, l.T2, l.Preferred, l.Valid)
	at := func(d time.Duration) time.Time {
		if d == Infinite {
			return time.Time{}
		}
		return l.Acquired.Add(d)
	}
	s := Schedule{RenewAt: at(t1), RebindAt: at(t2), DeprecatedAt: at(l.Preferred), ExpiresAt: at(l.Valid)}
	switch {
	case !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt):
		s.Phase, s.Next = Expired, now
	case !s.RebindAt.IsZero() && !now.Before(s.RebindAt):
		s.Phase, s.Next = Rebinding, retryAt(now, s.ExpiresAt)
	case !s.RenewAt.IsZero() && !now.Before(s.RenewAt):
		s.Phase, s.Next = Renewing, retryAt(now, s.RebindAt)
	default:
		s.Phase, s.Next = Bound, s.RenewAt
	}
	return s
}

// retryAt is half the time from now to end, at least MinRetry, or at
// least MinRetryShort when MinRetry would reach end; end itself when the
// retry would come less than MinRetryShort before it. With no end
// (infinite), MinRetry from now.
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
