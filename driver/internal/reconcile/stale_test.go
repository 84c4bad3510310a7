package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store/record"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// docker answers NetworkExists per network ID: one answer per question
// asked, the last repeated; it counts the questions by ID.
type docker struct {
	mu      sync.Mutex
	answers map[string][]func(ctx context.Context) (bool, error)
	asked   map[string]int
}

func newDocker() *docker {
	return &docker{answers: map[string][]func(context.Context) (bool, error){}, asked: map[string]int{}}
}

func (d *docker) say(id string, answers ...func(ctx context.Context) (bool, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[id] = answers
}

func (d *docker) NetworkExists(ctx context.Context, id string) (bool, error) {
	d.mu.Lock()
	as := d.answers[id]
	i := min(d.asked[id], len(as)-1)
	d.asked[id]++
	d.mu.Unlock()
	if len(as) == 0 {
		return false, errors.New("test: no answer for " + id)
	}
	return as[i](ctx)
}

func (d *docker) questions(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[id]
}

func live(context.Context) (bool, error)        { return true, nil }
func unknown(ctx context.Context) (bool, error) { return false, ctx.Err() }
func fails(err error) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) { return false, err }
}

// logged keeps the records logged; onRecord, when set, sees each.
type logged struct {
	mu       sync.Mutex
	recs     []slog.Record
	onRecord func(slog.Record)
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	f := l.onRecord
	l.mu.Unlock()
	if f != nil {
		f(r)
	}
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// attr is the value of key in the first record logged with msg prefix.
func (l *logged) attr(msgPrefix, key string) (slog.Value, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if !strings.HasPrefix(r.Message, msgPrefix) {
			continue
		}
		var v slog.Value
		found := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

const waitMsg = "Docker does not know a conflicting holder yet"

var want = drivertest.Macvlan(drivertest.NetC, "eth0", "bridge", "192.0.2.0/24")

// holder is a conflicting holder of eth0 created at created (zero: a
// record of a version that did not keep the time).
func holder(id string, created time.Time) plan.Conflict {
	n := drivertest.Macvlan(id, "eth0", "passthru", "198.51.100.0/24")
	n.Created = created
	return plan.Conflict{Holder: n, Reason: "passthru takes the whole parent"}
}

func checker(d NetworkChecker, clock *fakeclock.Clock, log *logged, grace time.Duration) *Checker {
	return &Checker{Docker: d, Grace: grace, Lookup: time.Hour, Now: clock.Now, Log: slog.New(log)}
}

func TestCheckNoDocker(t *testing.T) {
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{})}
	c := &Checker{Grace: time.Hour, Lookup: time.Hour, Now: time.Now, Log: slog.New(&logged{})}
	err := c.Check(context.Background(), want, "eth0", cs)
	if err == nil || err.Error() != plan.ConflictError(want, "eth0", cs).Error() {
		t.Fatalf("Check without Docker = %v, want the refusal %v", err, plan.ConflictError(want, "eth0", cs))
	}
}

// TestCheckOld: holders old enough are asked once each, at once; all
// unknown to Docker is no refusal, any live one or one Docker could not
// answer for refuses naming every holder.
func TestCheckOld(t *testing.T) {
	boom := errors.New("dial unix /var/run/docker.sock: connection refused")
	old := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name    string
		answers map[string]func(context.Context) (bool, error)
		refused bool
		mention []string
	}{
		{name: "all unknown", answers: map[string]func(context.Context) (bool, error){drivertest.NetA: unknown, drivertest.NetB: unknown}},
		{name: "one live", answers: map[string]func(context.Context) (bool, error){drivertest.NetA: unknown, drivertest.NetB: live},
			refused: true, mention: []string{"bbbbbbbbbbbb", "aaaaaaaaaaaa", "2 networks"}},
		{name: "Docker could not say", answers: map[string]func(context.Context) (bool, error){drivertest.NetA: unknown, drivertest.NetB: fails(boom)},
			refused: true, mention: []string{"could not be asked whether network bbbbbbbbbbbb still exists", "connection refused", "--docker-host"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDocker()
			for id, a := range tc.answers {
				d.say(id, a)
			}
			log := &logged{}
			c := checker(d, fakeclock.New(t0), log, time.Hour)
			cs := []plan.Conflict{holder(drivertest.NetA, old), holder(drivertest.NetB, time.Time{})}
			err := c.Check(context.Background(), want, "eth0", cs)
			if !tc.refused {
				if err != nil {
					t.Fatalf("Check = %v, want no refusal", err)
				}
			} else {
				drivertest.WantErr(t, err, pluginapi.ErrConflict, tc.mention...)
			}
			// Unrefused, every holder was asked once; refused, the question
			// that decided was asked, the others at most once (the check
			// does not wait for their answers).
			for id := range tc.answers {
				decided := !tc.refused || id == drivertest.NetB
				if n := d.questions(id); n > 1 || n == 0 && decided {
					t.Fatalf("Docker asked %d times about %s, want once", n, id[:12])
				}
			}
			if _, waited := log.attr(waitMsg, "wait"); waited {
				t.Fatal("Check waited for holders older than the grace period")
			}
		})
	}
}

// TestCheckFirstAnswerEnds: the first live holder ends the check without
// waiting for the other answers, whose questions are cancelled.
func TestCheckFirstAnswerEnds(t *testing.T) {
	d := newDocker()
	d.say(drivertest.NetA, live)
	cancelled := make(chan struct{})
	d.say(drivertest.NetB, func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		close(cancelled)
		return false, ctx.Err()
	})
	c := checker(d, fakeclock.New(t0), &logged{}, time.Hour)
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{}), holder(drivertest.NetB, time.Time{})}
	err := c.Check(context.Background(), want, "eth0", cs)
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "aaaaaaaaaaaa")
	<-cancelled // the unanswered question ends with the check
}

// TestCheckDeadline: the check as a whole is bounded by Lookup+Grace: a
// Docker that never answers counts as live.
func TestCheckDeadline(t *testing.T) {
	d := newDocker()
	d.say(drivertest.NetA, func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	})
	c := checker(d, fakeclock.New(t0), &logged{}, 0)
	c.Lookup = time.Millisecond
	err := c.Check(context.Background(), want, "eth0", []plan.Conflict{holder(drivertest.NetA, time.Time{})})
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "could not be asked", context.DeadlineExceeded.Error())
}

// TestCheckYoung: a holder Docker does not know but younger than the grace
// period is asked again once it is old enough (the youngest decides the
// wait); the second answer decides.
func TestCheckYoung(t *testing.T) {
	const grace = 40 * time.Millisecond
	for _, tc := range []struct {
		name    string
		refused bool
	}{
		{"still unknown", false},
		{"one stored by Docker meanwhile", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDocker()
			d.say(drivertest.NetA, unknown, unknown) // young
			d.say(drivertest.NetB, unknown, live)    // younger, when refused
			d.say(drivertest.NetC, unknown, live)    // old: asked once
			log := &logged{}
			c := checker(d, fakeclock.New(t0), log, grace)
			var cs []plan.Conflict
			if tc.refused { // the youngest first: it decides the wait
				cs = append(cs, holder(drivertest.NetB, t0.Add(-grace/4)))
			}
			cs = append(cs, holder(drivertest.NetA, t0.Add(-grace/2)), holder(drivertest.NetC, t0.Add(-2*grace)))
			err := c.Check(context.Background(), want, "eth0", cs)
			if tc.refused {
				drivertest.WantErr(t, err, pluginapi.ErrConflict)
			} else if err != nil {
				t.Fatalf("Check = %v, want no refusal", err)
			}
			young := drivertest.NetA // asked again, its answer awaited
			if tc.refused {
				young = drivertest.NetB
			}
			if n := d.questions(young); n != 2 {
				t.Fatalf("Docker asked %d times about the young holder, want twice", n)
			}
			if n := d.questions(drivertest.NetC); n != 1 {
				t.Fatalf("Docker asked %d times about the old holder, want once", n)
			}
			wantWait, wantYoung := grace/2, int64(1)
			if tc.refused {
				wantWait, wantYoung = grace*3/4, 2
			}
			if v, ok := log.attr(waitMsg, "wait"); !ok || v.Duration() != wantWait {
				t.Fatalf("logged wait %v (logged: %v), want %v", v, ok, wantWait)
			}
			if v, _ := log.attr(waitMsg, "holders"); v.Int64() != wantYoung {
				t.Fatalf("logged %v young holders, want %d", v, wantYoung)
			}
		})
	}
}

// TestCheckClockBack: a holder whose creation time lies ahead (the clock
// was stepped back) waits the grace period, never longer (the wait is
// read from the log; the context is cancelled then, not to wait it).
func TestCheckClockBack(t *testing.T) {
	const grace = time.Hour
	d := newDocker()
	d.say(drivertest.NetA, unknown)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &logged{onRecord: func(r slog.Record) {
		if strings.HasPrefix(r.Message, waitMsg) {
			cancel()
		}
	}}
	c := checker(d, fakeclock.New(t0), log, grace)
	err := c.Check(ctx, want, "eth0", []plan.Conflict{holder(drivertest.NetA, t0.Add(24*time.Hour))})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Check = %v, want it cut short in the grace wait", err)
	}
	if v, ok := log.attr(waitMsg, "wait"); !ok || v.Duration() != grace {
		t.Fatalf("logged wait %v (logged: %v), want the grace period %v", v, ok, grace)
	}
}

// TestCheckDeadlineSum: the check's deadline is the lookup's time plus
// the grace period: either alone leaves Docker time to answer.
func TestCheckDeadlineSum(t *testing.T) {
	for _, tc := range []struct{ lookup, grace time.Duration }{{time.Hour, 0}, {0, time.Hour}} {
		d := newDocker()
		d.say(drivertest.NetA, unknown) // answers only while the deadline has not passed
		c := checker(d, fakeclock.New(t0), &logged{}, tc.grace)
		c.Lookup = tc.lookup
		if err := c.Check(context.Background(), want, "eth0", []plan.Conflict{holder(drivertest.NetA, t0.Add(-2*time.Hour))}); err != nil {
			t.Errorf("Lookup %v, Grace %v: Check = %v, want no refusal", tc.lookup, tc.grace, err)
		}
	}
}

// TestAskDockerCancels: once an answer decides, the questions still out
// are cancelled, before askDocker returns.
func TestAskDockerCancels(t *testing.T) {
	d := newDocker()
	bAsked := make(chan struct{})
	out := make(chan context.Context, 1)
	d.say(drivertest.NetA, func(context.Context) (bool, error) {
		<-bAsked // A decides once B's question is out
		return true, nil
	})
	d.say(drivertest.NetB, func(ctx context.Context) (bool, error) {
		out <- ctx
		close(bAsked)
		<-ctx.Done()
		return false, ctx.Err()
	})
	c := checker(d, fakeclock.New(t0), &logged{}, 0)
	a := c.askDocker(context.Background(), []record.Network{holder(drivertest.NetA, time.Time{}).Holder, holder(drivertest.NetB, time.Time{}).Holder})
	if a == nil || a.holder.ID != drivertest.NetA || !a.live {
		t.Fatalf("askDocker = %+v, want holder A live", a)
	}
	if ctx := <-out; ctx.Err() == nil {
		t.Fatal("the question about B is still out after askDocker returned")
	}
}

// TestCheckCancelledWhileWaiting: the request's context ending during the
// grace wait ends the check with its error, naming the young holder.
func TestCheckCancelledWhileWaiting(t *testing.T) {
	d := newDocker()
	d.say(drivertest.NetA, unknown)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &logged{onRecord: func(r slog.Record) {
		if strings.HasPrefix(r.Message, waitMsg) {
			cancel()
		}
	}}
	c := checker(d, fakeclock.New(t0), log, time.Hour)
	err := c.Check(ctx, want, "eth0", []plan.Conflict{holder(drivertest.NetA, t0.Add(-time.Minute))})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Check = %v, want the context's end", err)
	}
	drivertest.WantErr(t, err, nil, "aaaaaaaaaaaa", "eth0")
	if n := d.questions(drivertest.NetA); n != 1 {
		t.Fatalf("asked %d times, want once (the wait was cut short)", n)
	}
}

// locks is a Locker whose keys are free unless busy, remembering what is
// held.
type locks struct {
	mu   sync.Mutex
	busy map[string]bool
	held []string
}

func (l *locks) TryExclusive(k keylock.Key) (func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.Rank != keylock.Network {
		panic("a holder's lock of rank " + k.Rank.String())
	}
	if l.busy[k.Name] || slices.Contains(l.held, k.Name) {
		return nil, false
	}
	l.held = append(l.held, k.Name)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.held = slices.DeleteFunc(l.held, func(n string) bool { return n == k.Name })
	}, true
}

func (l *locks) holding() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.held)
}

type events struct{ refused, removed int }

func (e *events) ConflictRefused()             { e.refused++ }
func (e *events) StaleRemoved()                { e.removed++ }
func (e *events) ReservationRolledBack(string) {}
func (e *events) ReconcileAction(string)       {}
func (e *events) RepairAction(string)          {}
func (e *events) ContainerRepair(string)       {}

type holdersFixture struct {
	h       *Holders
	d       *docker
	locks   *locks
	ev      *events
	removed []string
	held    [][]string // the locks held at each Remove
}

// remover is a Remover that calls itself.
type remover func(ctx context.Context, n record.Network) error

func (r remover) RemoveNetwork(ctx context.Context, n record.Network) error { return r(ctx, n) }

func newHolders(t *testing.T, removeErr error) *holdersFixture {
	t.Helper()
	f := &holdersFixture{d: newDocker(), locks: &locks{busy: map[string]bool{}}, ev: &events{}}
	f.h = &Holders{
		Check: checker(f.d, fakeclock.New(t0), &logged{}, time.Hour),
		Locks: f.locks,
		Remover: remover(func(_ context.Context, n record.Network) error {
			f.removed = append(f.removed, n.ID)
			f.held = append(f.held, f.locks.holding())
			return removeErr
		}),
		Events: f.ev,
		Log:    slog.New(&logged{}),
	}
	return f
}

func TestClearStale(t *testing.T) {
	f := newHolders(t, nil)
	f.d.say(drivertest.NetA, unknown)
	f.d.say(drivertest.NetB, unknown)
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{}), holder(drivertest.NetB, time.Time{})}
	release, err := f.h.Clear(context.Background(), want, "eth0", cs)
	if err != nil {
		t.Fatalf("Clear = %v", err)
	}
	if want := []string{drivertest.NetA, drivertest.NetB}; !slices.Equal(f.removed, want) {
		t.Fatalf("removed %v, want %v", f.removed, want)
	}
	for i, held := range f.held {
		if !slices.Equal(held, []string{drivertest.NetA, drivertest.NetB}) {
			t.Fatalf("remove %d ran holding %v, want both holders' network locks", i, held)
		}
	}
	if f.ev.removed != 2 || f.ev.refused != 0 {
		t.Fatalf("events: %d removed, %d refused; want 2, 0", f.ev.removed, f.ev.refused)
	}
	if got := f.locks.holding(); len(got) != 2 {
		t.Fatalf("holding %v before release, want the holders' locks", got)
	}
	release()
	if got := f.locks.holding(); len(got) != 0 {
		t.Fatalf("holding %v after release", got)
	}
}

func TestClearLive(t *testing.T) {
	f := newHolders(t, nil)
	f.d.say(drivertest.NetA, unknown)
	f.d.say(drivertest.NetB, live)
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{}), holder(drivertest.NetB, time.Time{})}
	release, err := f.h.Clear(context.Background(), want, "eth0", cs)
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "bbbbbbbbbbbb")
	release()
	if len(f.removed) != 0 || len(f.locks.holding()) != 0 || f.ev.removed != 0 {
		t.Fatalf("a refused Clear removed %v, holds %v, counted %d removals", f.removed, f.locks.holding(), f.ev.removed)
	}
}

// TestClearBusy: a stale holder's lock another request holds refuses the
// create before anything is removed; release frees the locks taken.
func TestClearBusy(t *testing.T) {
	f := newHolders(t, nil)
	f.d.say(drivertest.NetA, unknown)
	f.d.say(drivertest.NetB, unknown)
	f.locks.busy[drivertest.NetB] = true
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{}), holder(drivertest.NetB, time.Time{})}
	release, err := f.h.Clear(context.Background(), want, "eth0", cs)
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "bbbbbbbbbbbb", "another request is using right now")
	if len(f.removed) != 0 {
		t.Fatalf("removed %v though a holder's lock was busy", f.removed)
	}
	if got := f.locks.holding(); !slices.Equal(got, []string{drivertest.NetA}) {
		t.Fatalf("holding %v before release, want the lock taken", got)
	}
	release()
	if got := f.locks.holding(); len(got) != 0 {
		t.Fatalf("holding %v after release", got)
	}
}

func TestClearRemoveFails(t *testing.T) {
	boom := errors.New("link busy")
	f := newHolders(t, boom)
	f.d.say(drivertest.NetA, unknown)
	f.d.say(drivertest.NetB, unknown)
	cs := []plan.Conflict{holder(drivertest.NetA, time.Time{}), holder(drivertest.NetB, time.Time{})}
	release, err := f.h.Clear(context.Background(), want, "eth0", cs)
	if !errors.Is(err, boom) {
		t.Fatalf("Clear = %v, want the removal's error", err)
	}
	drivertest.WantErr(t, err, nil, "remove stale network aaaaaaaaaaaa", "eth0")
	if !slices.Equal(f.removed, []string{drivertest.NetA}) || f.ev.removed != 0 {
		t.Fatalf("removed %v, counted %d; want the first tried, none counted", f.removed, f.ev.removed)
	}
	release()
	if got := f.locks.holding(); len(got) != 0 {
		t.Fatalf("holding %v after release", got)
	}
}

func TestRefused(t *testing.T) {
	f := newHolders(t, nil)
	conflict := plan.ConflictError(want, "eth0", []plan.Conflict{holder(drivertest.NetA, time.Time{})})
	other := errors.New("netlink: no buffer space")
	for _, err := range []error{conflict, other, nil} {
		if got := f.h.Refused(err); got != err {
			t.Fatalf("Refused(%v) = %v, want it unchanged", err, got)
		}
	}
	if f.ev.refused != 1 {
		t.Fatalf("counted %d refusals, want the conflict's one", f.ev.refused)
	}
}
