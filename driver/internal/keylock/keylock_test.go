package keylock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Quiet tells a request whether any parent lock changed hands between its
// lookup and its own take: a take and release by someone else in between,
// or a holder from before that made it wait, both count; its own takes,
// shared takes and other ranks do not.
func TestQuiet(t *testing.T) {
	ctx := context.Background()
	l := New()
	take := func(reqs ...Req) func() {
		t.Helper()
		_, unlock, err := l.Acquire(ctx, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		return unlock
	}

	before := l.Changes(Parent)
	take(Shared(NetworkKey("n1")), Exclusive(EndpointKey("e1")), Shared(ParentKey("eth1")))()
	unlock := take(Exclusive(NetworkKey("n2")), Exclusive(ParentKey("eth0")))
	if !l.Quiet(Parent, before, 1) {
		t.Error("only the caller's own take happened, but the parents are not quiet")
	}
	unlock()

	before = l.Changes(Parent)
	take(Exclusive(ParentKey("eth9")))() // another request, taken and released in between
	unlock = take(Exclusive(ParentKey("eth0")))
	if l.Quiet(Parent, before, 1) {
		t.Error("a parent lock taken and released in between went unnoticed")
	}
	unlock()

	if release, ok := l.TryExclusive(ParentKey("eth0")); !ok {
		t.Fatal("TryExclusive of a free lock failed")
	} else {
		before = l.Changes(Parent) // the holder took it before the lookup
		type taken struct {
			unlock func()
			quiet  bool
		}
		done := make(chan taken)
		go func() { // the caller checks as soon as it holds the lock
			u := take(Exclusive(ParentKey("eth0")))
			done <- taken{u, l.Quiet(Parent, before, 1)}
		}()
		time.Sleep(20 * time.Millisecond)
		release() // ... and releases it while the caller waits
		got := <-done
		if got.quiet {
			t.Error("a holder from before the lookup that made the caller wait went unnoticed")
		}
		got.unlock()
	}
}

// The rank rule: holding a rank, a request may wait only for later ranks;
// an earlier or the same rank only by TryExclusive.
func TestRankOrderIsChecked(t *testing.T) {
	l := New()
	ctx, unlock, err := l.Acquire(context.Background(), Shared(NetworkKey("n1")), Exclusive(EndpointKey("e1")))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	pctx, unlockParent, err := l.Acquire(ctx, Exclusive(ParentKey("eth0")))
	if err != nil {
		t.Fatalf("a later rank: %v", err)
	}
	defer unlockParent()
	for _, k := range []Key{NetworkKey("n2"), EndpointKey("e2"), ParentKey("eth1")} {
		if _, _, err := l.Acquire(pctx, Exclusive(k)); !errors.Is(err, ErrOrder) {
			t.Errorf("waiting for the %s while holding a parent: %v, want ErrOrder", k, err)
		}
		release, ok := l.TryExclusive(k)
		if !ok {
			t.Errorf("TryExclusive of a free %s while holding a parent failed", k)
		} else {
			release()
		}
	}
	if _, _, err := l.Acquire(ctx, Exclusive(NetworkKey("n3"))); !errors.Is(err, ErrOrder) {
		t.Errorf("waiting for a network while holding an endpoint: %v, want ErrOrder", err)
	}
	// Without the context of a holder, any order is allowed (a new request).
	_, u, err := l.Acquire(context.Background(), Exclusive(NetworkKey("n4")), Exclusive(ParentKey("eth4")))
	if err != nil {
		t.Fatal(err)
	}
	u()
}

func TestWaitEndsWithTheContext(t *testing.T) {
	l := New()
	_, unlock, err := l.Acquire(context.Background(), Exclusive(ParentKey("eth0")))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := l.Acquire(ctx, Shared(ParentKey("eth0"))); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "parent eth0") {
		t.Fatalf("waiting on a held lock past the context: %v", err)
	}
}
