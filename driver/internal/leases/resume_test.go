package leases

import (
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
)

// TestResume: when a start acts on each family's lease first, as before
// the families shared one lifecycle. DHCP: at T1, or at once once T1 has
// passed (a lost lease's has). DHCPv6: as its
// plan says, a lost lease after lostLeaseRetry, a lease between T1 and T2
// at its retry within the phase, never before now.
func TestResume(t *testing.T) {
	now := t0.Add(time.Hour)
	v4 := func(t1 time.Duration, lost bool) record.Lease {
		l := record.Lease{Addr: "198.18.0.10/24", Acquired: t0, T1: t0.Add(t1), T2: t0.Add(2 * t1), Expiry: t0.Add(3 * t1)}
		if lost {
			l.Lost = now.Add(-time.Minute)
		}
		return l
	}
	for _, tc := range []struct {
		name string
		l    record.Lease
		want time.Time
	}{
		{"T1 ahead", v4(2*time.Hour, false), t0.Add(2 * time.Hour)},
		{"T1 passed", v4(30*time.Minute, false), now},
		{"lost", v4(30*time.Minute, true), now},
	} {
		if got := (DHCP{}).Resume(tc.l, now); !got.Equal(tc.want) {
			t.Errorf("DHCP %s: Resume at +%s, want +%s", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
	v6 := func(t1, t2, valid time.Duration, lost bool) record.Lease6 {
		l := record.Lease6{Addr: "2001:db8::10", Acquired: t0, T1: t1, T2: t2, Preferred: valid, Valid: valid}
		if lost {
			l.Lost = now.Add(-time.Minute)
		}
		return l
	}
	renewing := v6(50*time.Minute, 100*time.Minute, 4*time.Hour, false) // T1 passed, T2 in 40 min: retry in 20
	for _, tc := range []struct {
		name string
		l    record.Lease6
		want time.Time
	}{
		{"T1 ahead", v6(2*time.Hour, 3*time.Hour, 4*time.Hour, false), t0.Add(2 * time.Hour)},
		{"renewing", renewing, now.Add(20 * time.Minute)},
		{"lost", v6(2*time.Hour, 3*time.Hour, 4*time.Hour, true), now.Add(lostLeaseRetry)},
	} {
		if got := (DHCP6{}).Resume(tc.l, now); !got.Equal(tc.want) {
			t.Errorf("DHCPv6 %s: Resume at +%s, want +%s", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
}
