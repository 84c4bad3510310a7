package record

import (
	"testing"
	"time"
)

func TestLease6State(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := Lease6{Addr: "2001:db8::10", Acquired: t0, T1: time.Minute, T2: 2 * time.Minute, Preferred: 3 * time.Minute, Valid: 4 * time.Minute}
	lost := l
	lost.Lost = t0.Add(time.Second)
	forever := Lease6{Addr: "2001:db8::11", Acquired: t0, T1: Infinite6, T2: Infinite6, Preferred: Infinite6, Valid: Infinite6}
	for _, tc := range []struct {
		name string
		l    Lease6
		at   time.Duration
		want string
	}{
		{"before T1", l, 59 * time.Second, LeaseBound},
		{"at T1", l, time.Minute, LeaseRenewing},
		{"at T2", l, 2 * time.Minute, LeaseRebinding},
		{"at the valid lifetime's end, not marked", l, 4 * time.Minute, LeaseLost},
		{"marked lost before T1", lost, time.Second, LeaseLost},
		{"infinite, a century on", forever, 100 * 365 * 24 * time.Hour, LeaseBound},
	} {
		if got := tc.l.State(t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if !forever.At(Infinite6).IsZero() || !l.At(l.T1).Equal(t0.Add(time.Minute)) {
		t.Errorf("At: %v, %v; want zero for Infinite6 and Acquired+T1", forever.At(Infinite6), l.At(l.T1))
	}
}
