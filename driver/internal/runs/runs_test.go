package runs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestSet: a run ends when it returns, when its key's next run starts,
// or when its key is stopped; other keys' runs go on; StopAll ends the
// rest and waits for them to return, and nothing starts after it.
func TestSet(t *testing.T) {
	var s Set
	var ended atomic.Int32
	block := func(ctx context.Context) { <-ctx.Done(); ended.Add(1) }
	waitEnded := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for ended.Load() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d runs ended, want %d", ended.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	s.Start("a", block)
	s.Start("b", block)
	if got := s.Running(); got != 2 {
		t.Fatalf("%d running, want 2", got)
	}
	s.Start("a", block) // replaces a's first run
	waitEnded(1)
	s.Stop("b")
	waitEnded(2)
	s.Stop("nothing") // no run: nothing happens
	if got := s.Running(); got != 1 {
		t.Fatalf("%d running, want a's second run", got)
	}
	done := make(chan struct{})
	s.Start("c", func(context.Context) { close(done) }) // returns on its own
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for s.Running() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d running after c returned, want 1", s.Running())
		}
		time.Sleep(time.Millisecond)
	}
	s.StopAll()
	if ended.Load() != 3 || s.Running() != 0 {
		t.Fatalf("after StopAll: %d ended, %d running; want 3 and 0", ended.Load(), s.Running())
	}
	started := false
	s.Start("d", func(context.Context) { started = true })
	s.StopAll() // waits for a run, had one started
	if started || s.Running() != 0 {
		t.Fatalf("a run started after StopAll")
	}
}
