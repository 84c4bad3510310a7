package driver

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// The one lock mechanism of the driver: reader/writer locks keyed by name,
// taken in rank order (networks, then endpoints, then parent links) so no
// two requests can wait on each other in a cycle.
//
//   - CreateNetwork, DeleteNetwork: network exclusive, then its parent(s).
//   - Endpoint requests: network shared, then the endpoint exclusive, then
//     (only to repair a vanished parent) the parent.
//   - A request that already holds a later rank may only try (never wait
//     for) an earlier one.
//
// Each key is a weighted semaphore: a writer takes all of it, a reader one
// unit, and waits respect the request's context.

const (
	rankNetwork = iota
	rankEndpoint
	rankParent
)

// lockKey names one lock.
type lockKey struct {
	rank int
	name string
}

func networkLock(id string) lockKey  { return lockKey{rankNetwork, id} }
func endpointLock(id string) lockKey { return lockKey{rankEndpoint, id} }
func parentLock(name string) lockKey { return lockKey{rankParent, name} }

func (k lockKey) String() string {
	return [...]string{"network", "endpoint", "parent"}[k.rank] + " " + k.name
}

// lockReq asks for one key, shared or exclusive.
type lockReq struct {
	key    lockKey
	shared bool
}

func exclusive(k lockKey) lockReq { return lockReq{key: k} }
func shared(k lockKey) lockReq    { return lockReq{key: k, shared: true} }

const writerWeight = 1 << 30

type keyedLock struct {
	sem  *semaphore.Weighted
	refs int
}

// locker hands out keyed locks and forgets keys nobody holds or waits for.
type locker struct {
	mu   sync.Mutex
	keys map[lockKey]*keyedLock
	// parentEvents counts every exclusive take and every release of an
	// exclusive parent lock (quietParents).
	parentEvents atomic.Uint64
}

// parentCount is how many parent locks were taken and released
// exclusively so far.
func (l *locker) parentCount() uint64 { return l.parentEvents.Load() }

// quietParents reports whether, since parentCount returned before, no
// parent lock was taken or released exclusively but the taken ones (the
// caller's own takes). Every change underlay makes to a parent link happens
// under its exclusive lock, so a caller that looked a parent up before and
// finds the locks quiet after taking its own knows no such change ran in
// between: any holder in that window was either released in it or made
// the caller wait until its release, and both count.
func (l *locker) quietParents(before uint64, taken int) bool {
	return l.parentEvents.Load() == before+uint64(taken)
}

// countParent counts an exclusive take or release of a parent lock.
func (l *locker) countParent(k lockKey, shared bool) {
	if k.rank == rankParent && !shared {
		l.parentEvents.Add(1)
	}
}

func newLocker() *locker { return &locker{keys: map[lockKey]*keyedLock{}} }

func (l *locker) ref(k lockKey) *keyedLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[k]
	if !ok {
		e = &keyedLock{sem: semaphore.NewWeighted(writerWeight)}
		l.keys[k] = e
	}
	e.refs++
	return e
}

func (l *locker) unref(k lockKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[k]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(l.keys, k)
		}
	}
}

// acquire takes all the requested locks in rank order (duplicates merged,
// exclusive winning) and returns the function that releases them. If ctx
// ends first, nothing is held and the error names the lock it waited for.
func (l *locker) acquire(ctx context.Context, reqs ...lockReq) (func(), error) {
	reqs = mergeLocks(reqs)
	var held []func()
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	for _, r := range reqs {
		e := l.ref(r.key)
		w := int64(writerWeight)
		if r.shared {
			w = 1
		}
		if err := e.sem.Acquire(ctx, w); err != nil {
			l.unref(r.key)
			release()
			return nil, fmt.Errorf("waiting for the %s, which another request holds: %w", r.key, err)
		}
		key, sh := r.key, r.shared
		l.countParent(key, sh)
		// Counted before the lock is free: a waiter that takes it must
		// see this release in quietParents.
		held = append(held, func() { l.countParent(key, sh); e.sem.Release(w); l.unref(key) })
	}
	return release, nil
}

// tryExclusive takes the lock only if it is free right now.
func (l *locker) tryExclusive(k lockKey) (func(), bool) {
	e := l.ref(k)
	if !e.sem.TryAcquire(writerWeight) {
		l.unref(k)
		return nil, false
	}
	l.countParent(k, false)
	return func() { l.countParent(k, false); e.sem.Release(writerWeight); l.unref(k) }, true
}

func mergeLocks(reqs []lockReq) []lockReq {
	byKey := map[lockKey]bool{} // key -> shared
	for _, r := range reqs {
		if s, ok := byKey[r.key]; ok {
			byKey[r.key] = s && r.shared
		} else {
			byKey[r.key] = r.shared
		}
	}
	out := make([]lockReq, 0, len(byKey))
	for k, s := range byKey {
		out = append(out, lockReq{key: k, shared: s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key.rank != out[j].key.rank {
			return out[i].key.rank < out[j].key.rank
		}
		return out[i].key.name < out[j].key.name
	})
	return out
}
