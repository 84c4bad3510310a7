package driver

import (
	"context"
	"testing"
	"time"
)

// quietParents tells a request whether any parent lock changed hands
// between its lookup and its own take: a take and release by someone else
// in between, or a holder from before that made it wait, both count; its
// own takes, shared takes and other ranks do not.
func TestQuietParents(t *testing.T) {
	ctx := context.Background()
	l := newLocker()
	take := func(reqs ...lockReq) func() {
		t.Helper()
		unlock, err := l.acquire(ctx, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		return unlock
	}

	before := l.parentCount()
	take(shared(networkLock("n1")), exclusive(endpointLock("e1")), shared(parentLock("eth1")))()
	unlock := take(exclusive(networkLock("n2")), exclusive(parentLock("eth0")))
	if !l.quietParents(before, 1) {
		t.Error("only the caller's own take happened, but the parents are not quiet")
	}
	unlock()

	before = l.parentCount()
	take(exclusive(parentLock("eth9")))() // another request, taken and released in between
	unlock = take(exclusive(parentLock("eth0")))
	if l.quietParents(before, 1) {
		t.Error("a parent lock taken and released in between went unnoticed")
	}
	unlock()

	if release, ok := l.tryExclusive(parentLock("eth0")); !ok {
		t.Fatal("tryExclusive of a free lock failed")
	} else {
		before = l.parentCount() // the holder took it before the lookup
		type taken struct {
			unlock func()
			quiet  bool
		}
		done := make(chan taken)
		go func() { // the caller checks as soon as it holds the lock
			u := take(exclusive(parentLock("eth0")))
			done <- taken{u, l.quietParents(before, 1)}
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
