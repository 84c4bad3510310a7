package dhcp6

import (
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/leasetime"
)

func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := time.Hour
	l := Lease{Preferred: 3 * h, Valid: 4 * h, T1: h, T2: 2 * h, Acquired: t0}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name      string
		l         Lease
		now       time.Time
		phase     Phase
		next      time.Time
		renewAt   time.Time
		expiresAt time.Time
	}{
		{"just acquired", l, t0, Bound, at(h), at(h), at(4 * h)},
		{"at T1", l, at(h), Renewing, at(90 * time.Minute), at(h), at(4 * h)},
		{"late in renewing: at least MinRetry", l, at(2*h - 15*time.Second), Renewing, at(2*h - 5*time.Second), at(h), at(4 * h)},
		{"last second of renewing: T2", l, at(2*h - 500*time.Millisecond), Renewing, at(2 * h), at(h), at(4 * h)},
		{"at T2", l, at(2 * h), Rebinding, at(3 * h), at(h), at(4 * h)},
		{"at expiry", l, at(4 * h), Expired, at(4 * h), at(h), at(4 * h)},
		{"after expiry", l, at(5 * h), Expired, at(5 * h), at(h), at(4 * h)},
		{"T1 T2 0: 0.5 and 0.8 of preferred", Lease{Preferred: 10 * h, Valid: 20 * h, Acquired: t0}, at(5*h - time.Second), Bound, at(5 * h), at(5 * h), at(20 * h)},
		{"T1 T2 0, preferred 0: of valid", Lease{Valid: 10 * h, Acquired: t0}, at(8 * h), Rebinding, at(9 * h), at(5 * h), at(10 * h)},
		{"T2 after valid: 0.8 of valid", Lease{Preferred: h, Valid: 10 * h, T1: h, T2: 20 * h, Acquired: t0}, at(8 * h), Rebinding, at(9 * h), at(h), at(10 * h)},
		{"T1 after T2: T2", Lease{Preferred: 10 * h, Valid: 10 * h, T1: 9 * h, T2: 2 * h, Acquired: t0}, at(2 * h), Rebinding, at(6 * h), at(2 * h), at(10 * h)},
		{"infinite", Lease{Preferred: Infinite, Valid: Infinite, T1: Infinite, T2: Infinite, Acquired: t0}, at(1000 * h), Bound, time.Time{}, time.Time{}, time.Time{}},
		{"infinite valid, finite T1", Lease{Preferred: Infinite, Valid: Infinite, T1: h, T2: Infinite, Acquired: t0}, at(2 * h), Renewing, at(2*h + leasetime.MinRetry), at(h), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Plan(tc.l, tc.now)
			if s.Phase != tc.phase || !s.Next.Equal(tc.next) || !s.RenewAt.Equal(tc.renewAt) || !s.ExpiresAt.Equal(tc.expiresAt) {
				t.Errorf("Plan = %s next %s renew %s expires %s, want %s next %s renew %s expires %s",
					s.Phase, s.Next, s.RenewAt, s.ExpiresAt, tc.phase, tc.next, tc.renewAt, tc.expiresAt)
			}
		})
	}
}

// TestScheduleIsLeasetime: the phases of the API are leasetime's, which
// Plan converts.
func TestScheduleIsLeasetime(t *testing.T) {
	if Infinite != leasetime.Infinite {
		t.Errorf("Infinite %d differs from leasetime's", Infinite)
	}
	for p, want := range map[Phase]leasetime.Phase{Bound: leasetime.Bound, Renewing: leasetime.Renewing, Rebinding: leasetime.Rebinding, Expired: leasetime.Expired} {
		if leasetime.Phase(p) != want || p.String() != want.String() {
			t.Errorf("Phase %s is numbered %d, leasetime's %d", p, p, want)
		}
	}
}
