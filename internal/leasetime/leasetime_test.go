package leasetime

import (
	"testing"
	"time"
)

// TestPlan holds both families' cases: DHCPv4's (a lease time, T1 and T2
// as the ACK gave them, defaults already applied by package dhcp) and
// DHCPv6's (the valid lifetime as the end; anything may be Infinite).
func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type times struct{ t1, t2, end time.Duration }
	h := time.Hour
	hour := times{30 * time.Minute, 52*time.Minute + 30*time.Second, h}
	short := times{time.Minute, 105 * time.Second, 2 * time.Minute}
	ten := times{5 * time.Second, 8750 * time.Millisecond, 10 * time.Second}
	v6 := times{h, 2 * h, 4 * h}
	forever := times{Infinite, Infinite, Infinite}
	for _, tc := range []struct {
		name  string
		l     times
		now   time.Duration
		phase Phase
		next  time.Time
	}{
		// DHCPv4 (RFC 2131 section 4.4.5).
		{"fresh lease waits for T1", hour, 0, Bound, at(30 * time.Minute)},
		{"just before T1", hour, 30*time.Minute - time.Nanosecond, Bound, at(30 * time.Minute)},
		{"at T1 renew, retry at half the time to T2", hour, 30 * time.Minute, Renewing, at(41*time.Minute + 15*time.Second)},
		{"retry never sooner than MinRetry", hour, 52*time.Minute + 16*time.Second, Renewing, at(52*time.Minute + 26*time.Second)},
		{"less than 2×MinRetry left: half of it, at least MinRetryShort", hour, 52*time.Minute + 25*time.Second, Renewing, at(52*time.Minute + 27500*time.Millisecond)},
		{"retry never after the phase's end", hour, 52*time.Minute + 29500*time.Millisecond, Renewing, at(52*time.Minute + 30*time.Second)},
		{"at T2 rebind, retry at half the time to expiry", hour, 52*time.Minute + 30*time.Second, Rebinding, at(56*time.Minute + 15*time.Second)},
		{"near expiry a retry still comes before it", hour, 59*time.Minute + 55*time.Second, Rebinding, at(59*time.Minute + 57500*time.Millisecond)},
		{"in the last second the next step is the expiry", hour, 59*time.Minute + 59500*time.Millisecond, Rebinding, at(h)},
		{"at expiry", hour, h, Expired, at(h)},
		{"long expired acts now", hour, 3 * h, Expired, at(3 * h)},
		{"short lease renewing", short, time.Minute, Renewing, at(time.Minute + 22500*time.Millisecond)},
		{"short lease retry floor", short, 90 * time.Second, Renewing, at(100 * time.Second)},
		{"short lease rebinding", short, 110 * time.Second, Rebinding, at(115 * time.Second)},
		{"ten seconds: renewing", ten, 5 * time.Second, Renewing, at(6875 * time.Millisecond)},
		{"ten seconds: a retry less than a second before T2 is T2", ten, 6875 * time.Millisecond, Renewing, at(8750 * time.Millisecond)},
		{"before acquisition (clock stepped back) is bound", short, -h, Bound, at(time.Minute)},
		// DHCPv6 (RFC 8415 sections 18.2.4 and 18.2.5).
		{"v6 just acquired", v6, 0, Bound, at(h)},
		{"v6 at T1", v6, h, Renewing, at(90 * time.Minute)},
		{"v6 late in renewing: at least MinRetry", v6, 2*h - 15*time.Second, Renewing, at(2*h - 5*time.Second)},
		{"v6 last second of renewing: T2", v6, 2*h - 500*time.Millisecond, Renewing, at(2 * h)},
		{"v6 at T2", v6, 2 * h, Rebinding, at(3 * h)},
		{"v6 at expiry", v6, 4 * h, Expired, at(4 * h)},
		{"infinite", forever, 1000 * h, Bound, time.Time{}},
		{"infinite end, finite T1: retries MinRetry apart", times{h, Infinite, Infinite}, 2 * h, Renewing, at(2*h + MinRetry)},
		{"infinite end, finite T2", times{h, 2 * h, Infinite}, 3 * h, Rebinding, at(3*h + MinRetry)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Plan(t0, tc.l.t1, tc.l.t2, tc.l.end, at(tc.now))
			if s.Phase != tc.phase || !s.Next.Equal(tc.next) {
				t.Fatalf("Plan at +%s: %s next %s, want %s next %s", tc.now, s.Phase, s.Next, tc.phase, tc.next)
			}
			for _, c := range []struct {
				got time.Time
				d   time.Duration
			}{{s.RenewAt, tc.l.t1}, {s.RebindAt, tc.l.t2}, {s.ExpiresAt, tc.l.end}} {
				if want := at(c.d); c.d == Infinite && !c.got.IsZero() || c.d != Infinite && !c.got.Equal(want) {
					t.Errorf("time %s for %s, want acquisition plus it (zero when Infinite)", c.got, c.d)
				}
			}
		})
	}
	// A scheduler whose every attempt fails: attempts come before the
	// expiry, never two less than MinRetryShort apart, and rebinding
	// starts before it.
	for _, l := range []times{ten, short, hour, v6} {
		var attempts []time.Duration
		now := t0
		for range 1000 {
			s := Plan(t0, l.t1, l.t2, l.end, now)
			if s.Phase == Expired {
				break
			}
			if s.Phase != Bound {
				attempts = append(attempts, now.Sub(t0))
			}
			now = s.Next
		}
		rebinds := 0
		for i, a := range attempts {
			if i > 0 && a-attempts[i-1] < MinRetryShort {
				t.Errorf("lease of %s: attempts at +%s and +%s, less than %s apart", l.end, attempts[i-1], a, MinRetryShort)
			}
			if Plan(t0, l.t1, l.t2, l.end, t0.Add(a)).Phase == Rebinding {
				rebinds++
			}
		}
		if len(attempts) < 3 || rebinds < 1 || attempts[len(attempts)-1] >= l.end {
			t.Errorf("lease of %s: failing attempts at %v: want renewals and a rebinding before the expiry", l.end, attempts)
		}
	}
	for p, want := range map[Phase]string{Bound: "bound", Renewing: "renewing", Rebinding: "rebinding", Expired: "expired", 9: "unknown"} {
		if p.String() != want {
			t.Errorf("Phase(%d) is %q, want %q", p, p, want)
		}
	}
}
