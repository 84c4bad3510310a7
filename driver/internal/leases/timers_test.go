package leases

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/store/record"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func key(i int) Key { return Key{"net", fmt.Sprint("ep", i)} }

// lease is a lease acquired at t0 for an hour (T1 30 min, T2 52.5 min).
func lease() record.Lease {
	return record.Lease{Addr: "192.0.2.10/24", Acquired: t0, T1: t0.Add(30 * time.Minute), T2: t0.Add(52*time.Minute + 30*time.Second), Expiry: t0.Add(time.Hour)}
}

func TestNextAction(t *testing.T) {
	lost := lease()
	lost.Lost = t0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		l    record.Lease
		now  time.Time
		want time.Time
	}{
		{"bound: T1", lease(), t0.Add(time.Minute), t0.Add(30 * time.Minute)},
		{"renewing: half the time to T2", lease(), t0.Add(32*time.Minute + 30*time.Second), t0.Add(42*time.Minute + 30*time.Second)},
		{"rebinding: half the time to the expiry", lease(), t0.Add(54*time.Minute + 30*time.Second), t0.Add(57*time.Minute + 15*time.Second)},
		{"expired: a short retry, never a hot loop", lease(), t0.Add(2 * time.Hour), t0.Add(2*time.Hour + dhcp.MinRetryShort)},
		{"at the expiry", lease(), t0.Add(time.Hour), t0.Add(time.Hour + dhcp.MinRetryShort)},
		{"lost: the lost retry", lost, t0.Add(10 * time.Minute), t0.Add(10*time.Minute + lostLeaseRetry)},
		{"lost, even before T1", lost, t0.Add(time.Minute), t0.Add(time.Minute + lostLeaseRetry)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextAction(tc.l, tc.now); !got.Equal(tc.want) {
				t.Fatalf("NextAction at %v = %v, want %v", tc.now.Sub(t0), got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

func TestTimersNext(t *testing.T) {
	tm := NewTimers()
	if due, at := tm.Next(t0); len(due) != 0 || !at.IsZero() {
		t.Fatalf("Next of nothing = %v, %v", due, at)
	}
	tm.Set(key(1), t0.Add(-time.Second))
	tm.Set(key(2), t0)
	tm.Set(key(3), t0.Add(time.Hour))
	tm.Set(key(4), t0.Add(time.Minute))
	if n := tm.Scheduled(); n != 4 {
		t.Fatalf("Scheduled = %d, want 4", n)
	}
	if at, ok := tm.Due(key(4)); !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Due(4) = %v, %v", at, ok)
	}

	due, at := tm.Next(t0)
	slices.SortFunc(due, func(a, b Key) int { return cmpString(a.Endpoint, b.Endpoint) })
	if !slices.Equal(due, []Key{key(1), key(2)}) || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Next = %v, %v; want the keys due at or before now, and the earliest later time", due, at.Sub(t0))
	}
	// Taken keys are in flight: not scheduled, not taken again.
	if _, ok := tm.Due(key(1)); ok {
		t.Fatal("a key Next handed out is still scheduled")
	}
	if n := tm.Scheduled(); n != 2 {
		t.Fatalf("Scheduled = %d after Next, want 2", n)
	}
	if due, _ := tm.Next(t0); len(due) != 0 {
		t.Fatalf("Next again = %v, want nothing", due)
	}
	// Set ends a flight: the renewal scheduled it again.
	tm.Set(key(1), t0.Add(30*time.Second))
	if due, at := tm.Next(t0); len(due) != 0 || !at.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("Next = %v, %v; want nothing due, next at 30s", due, at.Sub(t0))
	}
	// Set again moves a due time.
	tm.Set(key(3), t0.Add(time.Second))
	if due, at := tm.Next(t0.Add(time.Second)); !slices.Equal(due, []Key{key(3)}) || !at.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("Next = %v, %v; want key 3 (moved earlier), next at 30s", due, at.Sub(t0))
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestTimersSetWakes: Set wakes the loop's wait, without blocking when no
// one waits.
func TestTimersSetWakes(t *testing.T) {
	tm := NewTimers()
	for i := range 3 {
		tm.Set(key(i), t0) // never blocks, though nothing reads
	}
	select {
	case <-tm.wake:
	default:
		t.Fatal("Set did not wake")
	}
}

// TestTimersDrop: a dropped lease is forgotten; one in flight has its
// exchange cancelled, or, when its exchange has not begun, refused to
// begin it.
func TestTimersDrop(t *testing.T) {
	t.Run("scheduled", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Drop(key(1))
		if _, ok := tm.Due(key(1)); ok || tm.Scheduled() != 0 {
			t.Fatal("a dropped lease is still scheduled")
		}
		if due, _ := tm.Next(t0); len(due) != 0 {
			t.Fatalf("Next = %v after Drop", due)
		}
		// Not in flight: nothing to refuse later.
		if !tm.Exchange(key(1), func() {}) {
			t.Fatal("Exchange refused for a lease dropped while not in flight")
		}
	})
	t.Run("in flight, exchange under way", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Next(t0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if !tm.Exchange(key(1), cancel) {
			t.Fatal("Exchange refused")
		}
		tm.Drop(key(1))
		if ctx.Err() == nil {
			t.Fatal("Drop left the exchange under way")
		}
		tm.Exchanged(key(1))
		if !tm.Exchange(key(1), func() {}) {
			t.Fatal("a cancelled exchange left the lease refused")
		}
	})
	t.Run("in flight, exchange not begun", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Next(t0)
		tm.Drop(key(1))
		called := false
		if tm.Exchange(key(1), func() { called = true }) {
			t.Fatal("Exchange allowed for a lease dropped in flight")
		}
		if called {
			t.Fatal("the refused exchange's cancel was called")
		}
		// Refused once: the drop is consumed.
		if !tm.Exchange(key(1), func() {}) {
			t.Fatal("Exchange refused a second time")
		}
	})
	t.Run("set again after a drop", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Next(t0)
		tm.Drop(key(1))
		tm.Set(key(1), t0.Add(time.Hour)) // the endpoint came back
		if !tm.Exchange(key(1), func() {}) {
			t.Fatal("Exchange refused for a lease set again after its drop")
		}
	})
	t.Run("after the exchange ended", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Next(t0)
		cancelled := false
		tm.Exchange(key(1), func() { cancelled = true })
		tm.Exchanged(key(1))
		tm.Drop(key(1))
		if cancelled {
			t.Fatal("Drop cancelled an exchange that had ended")
		}
	})
	t.Run("other leases untouched", func(t *testing.T) {
		tm := NewTimers()
		tm.Set(key(1), t0)
		tm.Set(key(2), t0)
		tm.Next(t0)
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		tm.Exchange(key(2), cancel2)
		tm.Set(key(3), t0.Add(time.Hour))
		tm.Drop(key(1))
		if ctx2.Err() != nil {
			t.Fatal("Drop(1) cancelled lease 2's exchange")
		}
		if _, ok := tm.Due(key(3)); !ok {
			t.Fatal("Drop(1) forgot lease 3")
		}
	})
}

// loopFixture runs Timers.Loop on a fake clock; renew reports each call
// (the key and the clock's time) and schedules the lease again as told.
type loopFixture struct {
	tm     *Timers
	clock  *fakeclock.Clock
	stop   chan struct{}
	calls  chan renewCall
	cancel context.CancelFunc
}

type renewCall struct {
	k   Key
	now time.Time
	ctx context.Context
}

func startLoop(t *testing.T, renew func(f *loopFixture, ctx context.Context, k Key)) *loopFixture {
	t.Helper()
	f := &loopFixture{tm: NewTimers(), clock: fakeclock.New(t0), stop: make(chan struct{}), calls: make(chan renewCall, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.tm.Loop(ctx, f.stop, f.clock.Now, func(ctx context.Context, k Key) {
		f.calls <- renewCall{k, f.clock.Now(), ctx}
		if renew != nil {
			renew(f, ctx, k)
		}
	})
	t.Cleanup(func() {
		cancel()
		f.tm.Wait()
	})
	return f
}

// TestLoopRenewsWhenDue: renew is called for each lease once it is due
// on the injected clock, never before; a Set wakes the loop.
func TestLoopRenewsWhenDue(t *testing.T) {
	f := startLoop(t, nil)
	f.tm.Set(key(1), t0)
	f.tm.Set(key(2), t0.Add(time.Hour))
	c := <-f.calls
	if c.k != key(1) || c.now.Before(t0) {
		t.Fatalf("renewed %v at %v, want key 1 at t0", c.k, c.now.Sub(t0))
	}
	f.clock.Advance(time.Hour)
	f.tm.Set(key(3), t0.Add(24*time.Hour)) // wakes the loop
	c = <-f.calls
	if c.k != key(2) || c.now.Before(t0.Add(time.Hour)) {
		t.Fatalf("renewed %v at %v, want key 2 once an hour passed", c.k, c.now.Sub(t0))
	}
	if _, ok := f.tm.Due(key(3)); !ok {
		t.Fatal("key 3, due tomorrow, is no longer scheduled")
	}
	close(f.stop)
	f.tm.Wait()
	select {
	case c := <-f.calls:
		t.Fatalf("renewed %v, which was not due", c.k)
	default:
	}
}

// TestLoopRenewSchedulesAgain: the renewal's Set is what brings a lease
// back; each round comes when the clock reaches it.
func TestLoopRenewSchedulesAgain(t *testing.T) {
	f := startLoop(t, func(f *loopFixture, _ context.Context, k Key) {
		f.tm.Set(k, f.clock.Now().Add(time.Minute))
	})
	f.tm.Set(key(1), t0)
	for round := range 3 {
		c := <-f.calls
		if want := t0.Add(time.Duration(round) * time.Minute); c.k != key(1) || c.now.Before(want) {
			t.Fatalf("round %d: renewed %v at %v, want key 1 at %v", round, c.k, c.now.Sub(t0), want.Sub(t0))
		}
		// Wait for the renewal's Set, then move the clock to it and wake.
		for {
			if at, ok := f.tm.Due(key(1)); ok {
				f.clock.Advance(at.Sub(f.clock.Now()))
				break
			}
			runtime.Gosched()
		}
		f.tm.Set(key(9), t0.Add(24*time.Hour))
	}
}

// TestLoopStops: closing stop or ending ctx ends the loop and the
// context of the renewals under way; Wait waits for them all.
func TestLoopStops(t *testing.T) {
	for _, how := range []string{"stop", "ctx"} {
		t.Run(how, func(t *testing.T) {
			var ended atomic.Int32
			f := startLoop(t, func(_ *loopFixture, ctx context.Context, _ Key) {
				<-ctx.Done() // a silent server
				ended.Add(1)
			})
			f.tm.Set(key(1), t0)
			f.tm.Set(key(2), t0)
			<-f.calls
			<-f.calls
			if how == "stop" {
				close(f.stop)
			} else {
				f.cancel()
			}
			f.tm.Wait() // returns only once the renewals' context ended
			if n := ended.Load(); n != 2 {
				t.Fatalf("Wait returned with %d of 2 renewals ended", 2-n)
			}
			f.tm.Set(key(3), t0)
			select {
			case c := <-f.calls:
				t.Fatalf("renewed %v after the loop ended", c.k)
			default:
			}
		})
	}
}

// TestLoopDropCancels: an endpoint deleted while its renewal talks to a
// silent server does not wait for it: Drop cancels the exchange.
func TestLoopDropCancels(t *testing.T) {
	done := make(chan error, 1)
	f := startLoop(t, func(f *loopFixture, ctx context.Context, k Key) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if !f.tm.Exchange(k, cancel) {
			done <- fmt.Errorf("exchange refused")
			return
		}
		defer f.tm.Exchanged(k)
		<-ctx.Done()
		done <- nil
	})
	f.tm.Set(key(1), t0)
	c := <-f.calls
	for { // the renewal registers its exchange
		f.tm.mu.Lock()
		_, ok := f.tm.cancels[c.k]
		f.tm.mu.Unlock()
		if ok {
			break
		}
		runtime.Gosched()
	}
	f.tm.Drop(c.k)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.ctx.Err() != nil {
		t.Fatal("Drop ended the loop's context, not the one exchange's")
	}
}

// TestLoopBounded: at most maxRenewals renewals run at once; the others
// wait their turn, and the loop with them: it reads the clock again (to
// wait for the next due time) only once every due lease has its turn,
// that is once all but maxRenewals of them have finished.
func TestLoopBounded(t *testing.T) {
	const n = maxRenewals + 8
	var mu sync.Mutex
	running, most, finished, nowCalls, finishedAtSecondNow := 0, 0, 0, 0, -1
	clock := fakeclock.New(t0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if nowCalls++; nowCalls == 2 {
			finishedAtSecondNow = finished
		}
		return clock.Now()
	}
	gate := make(chan struct{})
	calls := make(chan Key, n)
	tm := NewTimers()
	for i := range n {
		tm.Set(key(i), t0)
	}
	tm.Set(key(n), t0.Add(24*time.Hour)) // a later due time: the loop waits for it
	stop := make(chan struct{})
	tm.Loop(context.Background(), stop, now, func(_ context.Context, k Key) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		calls <- k
		<-gate
		mu.Lock()
		running--
		finished++
		mu.Unlock()
	})
	for range maxRenewals {
		<-calls
	}
	close(gate)
	for range n - maxRenewals {
		<-calls
	}
	close(stop)
	tm.Wait()
	mu.Lock()
	defer mu.Unlock()
	if most > maxRenewals {
		t.Fatalf("%d renewals ran at once, want at most %d", most, maxRenewals)
	}
	if finishedAtSecondNow < n-maxRenewals {
		t.Fatalf("the loop went on to wait with %d renewals finished, want at least %d: it did not wait for their turns", finishedAtSecondNow, n-maxRenewals)
	}
}
