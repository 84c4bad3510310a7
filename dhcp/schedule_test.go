package dhcp

import (
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/leasetime"
)

func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	hour := Lease{Acquired: t0, LeaseTime: time.Hour, T1: 30 * time.Minute, T2: 52*time.Minute + 30*time.Second}
	short := Lease{Acquired: t0, LeaseTime: 2 * time.Minute, T1: time.Minute, T2: 105 * time.Second}
	forever := Lease{Acquired: t0, LeaseTime: Infinite, T1: Infinite, T2: Infinite}
	zero := Lease{Acquired: t0, LeaseTime: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		l     Lease
		now   time.Duration
		phase Phase
		next  time.Duration
	}{
		{"fresh lease waits for T1", hour, 0, Bound, 30 * time.Minute},
		{"just before T1", hour, 30*time.Minute - time.Nanosecond, Bound, 30 * time.Minute},
		{"at T1 renew, retry at half the time to T2", hour, 30 * time.Minute, Renewing, 30*time.Minute + 11*time.Minute + 15*time.Second},
		{"retry never sooner than MinRetry", hour, 52*time.Minute + 16*time.Second, Renewing, 52*time.Minute + 26*time.Second},
		{"less than 2×MinRetry left: half of it, at least MinRetryShort", hour, 52*time.Minute + 25*time.Second, Renewing, 52*time.Minute + 27500*time.Millisecond},
		{"retry never after the phase's end", hour, 52*time.Minute + 29500*time.Millisecond, Renewing, 52*time.Minute + 30*time.Second},
		{"at T2 rebind, retry at half the time to expiry", hour, 52*time.Minute + 30*time.Second, Rebinding, 56*time.Minute + 15*time.Second},
		{"near expiry a retry still comes before it", hour, 59*time.Minute + 55*time.Second, Rebinding, 59*time.Minute + 57500*time.Millisecond},
		{"in the last second the next step is the expiry", hour, 59*time.Minute + 59500*time.Millisecond, Rebinding, time.Hour},
		{"at expiry", hour, time.Hour, Expired, time.Hour},
		{"long expired acts now", hour, 3 * time.Hour, Expired, 3 * time.Hour},
		{"short lease renewing", short, time.Minute, Renewing, time.Minute + 22500*time.Millisecond},
		{"short lease retry floor", short, 90 * time.Second, Renewing, 100 * time.Second},
		{"short lease rebinding", short, 110 * time.Second, Rebinding, 115 * time.Second},
		{"T1 = T2 = 0 count as the defaults", zero, 0, Bound, 5 * time.Second},
		{"T1 = T2 = 0 renewing", zero, 5 * time.Second, Renewing, 6875 * time.Millisecond},
		{"T1 = T2 = 0 retry less than a second before T2: T2 instead", zero, 6875 * time.Millisecond, Renewing, 8750 * time.Millisecond},
		{"T1 = T2 = 0 rebinding at 7/8", zero, 8750 * time.Millisecond, Rebinding, 10 * time.Second},
		{"T2 past the expiry counts as 7/8", Lease{Acquired: t0, LeaseTime: 10 * time.Second, T1: 5 * time.Second, T2: time.Minute}, 9 * time.Second, Rebinding, 10 * time.Second},
		{"before acquisition (clock stepped back) is bound", short, -time.Hour, Bound, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Plan(tc.l, at(tc.now))
			if s.Phase != tc.phase || !s.Next.Equal(at(tc.next)) {
				t.Fatalf("Plan at +%s: %s next +%s, want %s next +%s", tc.now, s.Phase, s.Next.Sub(t0), tc.phase, tc.next)
			}
			if valid := tc.l.T1 > 0 && tc.l.T2 < tc.l.LeaseTime; valid && !s.RenewAt.Equal(at(tc.l.T1)) || valid && !s.RebindAt.Equal(at(tc.l.T2)) || !s.ExpiresAt.Equal(at(tc.l.LeaseTime)) {
				t.Fatalf("times %v %v %v, want T1 %s T2 %s expiry %s later", s.RenewAt, s.RebindAt, s.ExpiresAt, tc.l.T1, tc.l.T2, tc.l.LeaseTime)
			}
		})
	}
	// A scheduler whose every attempt fails: attempts come before the
	// expiry, never two less than MinRetryShort apart, and rebinding
	// starts before it (the shortest lease taken, T1 = T2 = 0 sent).
	for _, l := range []Lease{zero, {Acquired: t0, LeaseTime: MinLeaseTime, T1: MinLeaseTime, T2: MinLeaseTime}, short, hour} {
		var attempts []time.Duration
		now := t0
		for range 1000 {
			s := Plan(l, now)
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
				t.Errorf("lease of %s: attempts at +%s and +%s, less than %s apart", l.LeaseTime, attempts[i-1], a, MinRetryShort)
			}
			if Plan(l, t0.Add(a)).Phase == Rebinding {
				rebinds++
			}
		}
		if len(attempts) < 3 || rebinds < 1 || attempts[len(attempts)-1] >= l.LeaseTime {
			t.Errorf("lease of %s (T1 %s, T2 %s): failing attempts at %v: want renewals and a rebinding before the expiry", l.LeaseTime, l.T1, l.T2, attempts)
		}
	}
	t.Run("forever is never renewed", func(t *testing.T) {
		s := Plan(forever, at(1000*time.Hour))
		if s.Phase != Bound || !s.Next.IsZero() || !s.ExpiresAt.IsZero() {
			t.Fatalf("Plan of a lease forever: %+v, want Bound with no times", s)
		}
	})
	for p, want := range map[Phase]string{Bound: "bound", Renewing: "renewing", Rebinding: "rebinding", Expired: "expired", 9: "unknown"} {
		if p.String() != want {
			t.Errorf("Phase(%d) is %q, want %q", p, p, want)
		}
	}
}

// TestScheduleIsLeasetime: the phases and retry waits of the API are
// leasetime's, which Plan converts.
func TestScheduleIsLeasetime(t *testing.T) {
	if MinRetry != leasetime.MinRetry || MinRetryShort != leasetime.MinRetryShort || Infinite != leasetime.Infinite {
		t.Errorf("MinRetry %s, MinRetryShort %s, Infinite %d differ from leasetime's", MinRetry, MinRetryShort, Infinite)
	}
	for p, want := range map[Phase]leasetime.Phase{Bound: leasetime.Bound, Renewing: leasetime.Renewing, Rebinding: leasetime.Rebinding, Expired: leasetime.Expired} {
		if leasetime.Phase(p) != want {
			t.Errorf("Phase %s is numbered %d, leasetime's %d", p, p, want)
		}
	}
}
