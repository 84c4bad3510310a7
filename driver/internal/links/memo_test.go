package links

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSelfDeletions(t *testing.T) {
	type op struct {
		add   bool
		index int
		at    time.Duration // since t0, for add
		want  bool          // for claim
	}
	add := func(i int, at time.Duration) op { return op{add: true, index: i, at: at} }
	claim := func(i int, want bool) op { return op{index: i, want: want} }
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"zero value claims nothing", []op{claim(3, false)}},
		{"added is claimed once", []op{add(3, 0), claim(3, true), claim(3, false)}},
		{"by index only", []op{add(3, 0), claim(4, false), claim(3, true)}},
		{"added again is claimed again", []op{add(3, 0), claim(3, true), add(3, time.Second), claim(3, true)}},
		{"several at once", []op{add(1, 0), add(2, 0), claim(2, true), claim(1, true)}},
		{"within a minute kept", []op{add(1, 0), add(2, time.Minute), claim(1, true)}},
		{"older than a minute dropped by the next add", []op{add(1, 0), add(2, time.Minute+time.Nanosecond), claim(1, false), claim(2, true)}},
		{"re-adding refreshes the time", []op{add(1, 0), add(1, 50*time.Second), add(2, 100*time.Second), claim(1, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s SelfDeletions
			for i, o := range tc.ops {
				if o.add {
					s.Add(o.index, t0.Add(o.at))
					continue
				}
				if got := s.Claim(o.index); got != o.want {
					t.Fatalf("op %d: Claim(%d) = %v, want %v", i, o.index, got, o.want)
				}
			}
		})
	}
}

// TestSelfDeletionsBounded: unclaimed entries go a minute after their add,
// however many there are, and what is remembered stays that minute's.
func TestSelfDeletionsBounded(t *testing.T) {
	var s SelfDeletions
	for i := range 12_000 { // one every 10 ms for two minutes, none claimed
		s.Add(i, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	if len(s.at) != 6_001 || len(s.added) != 6_001 {
		t.Fatalf("remembered %d (in order %d) after two minutes of adds every 10 ms, want the last minute's 6001", len(s.at), len(s.added))
	}
	if s.Claim(5_998) || !s.Claim(5_999) || !s.Claim(11_999) {
		t.Error("claims at the minute's edge: want the entry a minute old kept, the older one dropped")
	}
}

func TestSelfDeletionsConcurrent(t *testing.T) {
	var s SelfDeletions
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Add(i, t0)
			if !s.Claim(i) {
				t.Errorf("Claim(%d) after its Add = false", i)
			}
		}()
	}
	wg.Wait()
}

// records keeps what was logged: level and message.
type records struct {
	mu  sync.Mutex
	got []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	r.got = append(r.got, line)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func TestFailureLog(t *testing.T) {
	errA, errB := errors.New("no such device"), errors.New("device busy")
	type op struct {
		clear     bool
		link, msg string
		err       error
	}
	warn := func(link, msg string, err error) op { return op{link: link, msg: msg, err: err} }
	clear := func(link string) op { return op{clear: true, link: link} }
	for _, tc := range []struct {
		name string
		ops  []op
		want []string
	}{
		{"first failure warns", []op{warn("eth0.10", "recreate", errA)},
			[]string{"WARN recreate error=no such device"}},
		{"the same again is debug", []op{warn("eth0.10", "recreate", errA), warn("eth0.10", "recreate", errA), warn("eth0.10", "recreate", errA)},
			[]string{"WARN recreate error=no such device", "DEBUG recreate (again) error=no such device", "DEBUG recreate (again) error=no such device"}},
		{"another error warns", []op{warn("eth0.10", "recreate", errA), warn("eth0.10", "recreate", errB)},
			[]string{"WARN recreate error=no such device", "WARN recreate error=device busy"}},
		{"another message warns", []op{warn("eth0.10", "recreate", errA), warn("eth0.10", "heal", errA)},
			[]string{"WARN recreate error=no such device", "WARN heal error=no such device"}},
		{"back to the first warns again", []op{warn("l", "m", errA), warn("l", "m", errB), warn("l", "m", errA)},
			[]string{"WARN m error=no such device", "WARN m error=device busy", "WARN m error=no such device"}},
		{"per link", []op{warn("a", "m", errA), warn("b", "m", errA), warn("a", "m", errA)},
			[]string{"WARN m error=no such device", "WARN m error=no such device", "DEBUG m (again) error=no such device"}},
		{"cleared warns again", []op{warn("a", "m", errA), clear("a"), warn("a", "m", errA)},
			[]string{"WARN m error=no such device", "WARN m error=no such device"}},
		{"clearing another link keeps it", []op{warn("a", "m", errA), clear("b"), warn("a", "m", errA)},
			[]string{"WARN m error=no such device", "DEBUG m (again) error=no such device"}},
		{"zero value clears", []op{clear("a"), warn("a", "m", errA)},
			[]string{"WARN m error=no such device"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f FailureLog
			rec := &records{}
			log := slog.New(rec)
			for _, o := range tc.ops {
				if o.clear {
					f.Clear(o.link)
				} else {
					f.Warn(log, o.link, o.msg, o.err)
				}
			}
			if len(rec.got) != len(tc.want) {
				t.Fatalf("logged %q, want %q", rec.got, tc.want)
			}
			for i := range tc.want {
				if rec.got[i] != tc.want[i] {
					t.Fatalf("logged %q, want %q", rec.got, tc.want)
				}
			}
		})
	}
}
