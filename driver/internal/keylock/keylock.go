// Package keylock is the one lock mechanism of the driver: reader/writer
// locks keyed by name, in three ranks taken in order (networks, then
// endpoints, then parent links), so that no two requests can wait on each
// other in a cycle.
//
//   - CreateNetwork, DeleteNetwork: the network exclusive, then its
//     parent(s).
//   - Endpoint requests: the network shared, then the endpoint exclusive,
//     then (only to repair a vanished parent or host link) the parent.
//   - A request that already holds a rank may only try (TryExclusive, never
//     wait for) a lock of the same or an earlier rank.
//
// The last rule is checked here: Acquire returns a context that records the
// ranks it holds, and an Acquire given such a context refuses (ErrOrder) to
// wait for a lock that is not of a later rank. The check sees only what
// such contexts are passed on to; a context must not be used after its
// locks are released (it would still say they are held).
//
// Each key is a weighted semaphore: a writer takes all of it, a reader one
// unit, and waits respect the request's context.
//
// Endpoint and Parents (records.go) are the two ways of taking locks that
// more than one part of the driver shares: an endpoint's locks with its
// records read under them (the endpoint requests, a lease's renewal), and
// parent links' locks shared (a lost lease's block).
package keylock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Rank orders the locks: a request takes them in this order.
type Rank int

const (
	Network Rank = iota
	Endpoint
	Parent
	ranks
)

func (r Rank) String() string { return [...]string{"network", "endpoint", "parent"}[r] }

// Key names one lock.
type Key struct {
	Rank Rank
	Name string
}

// NetworkKey, EndpointKey and ParentKey are the keys of each rank.
func NetworkKey(id string) Key  { return Key{Network, id} }
func EndpointKey(id string) Key { return Key{Endpoint, id} }
func ParentKey(name string) Key { return Key{Parent, name} }
func (k Key) String() string    { return k.Rank.String() + " " + k.Name }

// Req asks for one key, shared or exclusive.
type Req struct {
	Key    Key
	Shared bool
}

// Exclusive and Shared ask for a key.
func Exclusive(k Key) Req { return Req{Key: k} }
func Shared(k Key) Req    { return Req{Key: k, Shared: true} }

// ErrOrder is wrapped by an Acquire that would wait for a lock of a rank
// its context already holds, or an earlier one.
var ErrOrder = errors.New("lock order")

const writerWeight = 1 << 30

type keyedLock struct {
	sem  *semaphore.Weighted
	refs int
}

// Locker hands out keyed locks and forgets keys nobody holds or waits for.
type Locker struct {
	mu   sync.Mutex
	keys map[Key]*keyedLock
	// changes counts, by rank, every exclusive take and every release of
	// an exclusive lock (Quiet).
	changes [ranks]atomic.Uint64
}

// New returns a Locker.
func New() *Locker { return &Locker{keys: map[Key]*keyedLock{}} }

// Changes is how many locks of rank r were taken and released
// exclusively so far.
func (l *Locker) Changes(r Rank) uint64 { return l.changes[r].Load() }

// Quiet reports whether, since Changes(r) returned before, no lock of rank
// r was taken or released exclusively but the caller's own taken takes. A
// caller that looked something up before and finds the locks quiet after
// taking its own knows that no change made under such a lock ran in
// between: any holder in that window was either released in it or made
// the caller wait until its release, and both count.
func (l *Locker) Quiet(r Rank, before uint64, taken int) bool {
	return l.changes[r].Load() == before+uint64(taken)
}

func (l *Locker) count(k Key, shared bool) {
	if !shared {
		l.changes[k.Rank].Add(1)
	}
}

func (l *Locker) ref(k Key) *keyedLock {
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

func (l *Locker) unref(k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[k]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(l.keys, k)
		}
	}
}

// holding is the context key of the highest rank a context's request
// holds.
type holding struct{}

// held is the highest rank ctx records as held, or -1.
func held(ctx context.Context) Rank {
	if r, ok := ctx.Value(holding{}).(Rank); ok {
		return r
	}
	return -1
}

// Acquire takes all the requested locks in rank order (duplicates merged,
// exclusive winning) and returns a context recording them (pass it to any
// Acquire made while they are held) and the function that releases them.
// If ctx ends first, nothing is held and the error names the lock it
// waited for. A request for a rank ctx already holds, or an earlier one,
// is refused with ErrOrder: only TryExclusive may take such a lock.
func (l *Locker) Acquire(ctx context.Context, reqs ...Req) (context.Context, func(), error) {
	reqs = Merge(reqs)
	if len(reqs) == 0 {
		return ctx, func() {}, nil
	}
	if h := held(ctx); h >= reqs[0].Key.Rank {
		return ctx, nil, fmt.Errorf("%w: waiting for the %s while holding a %s lock could deadlock: take it before, or only try it", ErrOrder, reqs[0].Key, h)
	}
	var locks []func()
	release := func() {
		for i := len(locks) - 1; i >= 0; i-- {
			locks[i]()
		}
	}
	for _, r := range reqs {
		e := l.ref(r.Key)
		w := int64(writerWeight)
		if r.Shared {
			w = 1
		}
		if err := e.sem.Acquire(ctx, w); err != nil {
			l.unref(r.Key)
			release()
			return ctx, nil, fmt.Errorf("waiting for the %s, which another request holds: %w", r.Key, err)
		}
		key, sh := r.Key, r.Shared
		l.count(key, sh)
		// Counted before the lock is free: a waiter that takes it must
		// see this release in Quiet.
		locks = append(locks, func() { l.count(key, sh); e.sem.Release(w); l.unref(key) })
	}
	return context.WithValue(ctx, holding{}, reqs[len(reqs)-1].Key.Rank), release, nil
}

// Trier tries an exclusive lock without waiting (Locker): what a caller
// that already holds a lock of a later rank may do.
type Trier interface {
	TryExclusive(k Key) (func(), bool)
}

// TryExclusive takes the lock only if it is free right now, whatever the
// caller holds.
func (l *Locker) TryExclusive(k Key) (func(), bool) {
	e := l.ref(k)
	if !e.sem.TryAcquire(writerWeight) {
		l.unref(k)
		return nil, false
	}
	l.count(k, false)
	return func() { l.count(k, false); e.sem.Release(writerWeight); l.unref(k) }, true
}

// Merge sorts requests in rank order and merges duplicates (exclusive
// wins).
func Merge(reqs []Req) []Req {
	byKey := map[Key]bool{} // key -> shared
	for _, r := range reqs {
		if s, ok := byKey[r.Key]; ok {
			byKey[r.Key] = s && r.Shared
		} else {
			byKey[r.Key] = r.Shared
		}
	}
	out := make([]Req, 0, len(byKey))
	for k, s := range byKey {
		out = append(out, Req{Key: k, Shared: s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key.Rank != out[j].Key.Rank {
			return out[i].Key.Rank < out[j].Key.Rank
		}
		return out[i].Key.Name < out[j].Key.Name
	})
	return out
}
