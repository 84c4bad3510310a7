package store

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// errClosed answers Batch calls made after Close.
var errClosed = errors.New("state file is closed")

// batcher is a group commit: one goroutine takes every call queued while the
// previous commit was running and commits them in one transaction. A lone
// call commits at once (no batching delay), concurrent calls share fsyncs.
type batcher struct {
	db    *bolt.DB
	max   int
	calls chan *call
	mu    sync.RWMutex // guards closed against sends on a closed channel
	done  chan struct{}
	shut  bool
}

type call struct {
	fn  func(*Tx) error
	err chan error
}

func newBatcher(db *bolt.DB, max int) *batcher {
	b := &batcher{db: db, max: max, calls: make(chan *call, max), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *batcher) do(fn func(*Tx) error) error {
	c := &call{fn: fn, err: make(chan error, 1)}
	b.mu.RLock()
	if b.shut {
		b.mu.RUnlock()
		return errClosed
	}
	b.calls <- c
	b.mu.RUnlock()
	return <-c.err
}

func (b *batcher) close() {
	b.mu.Lock()
	if !b.shut {
		b.shut = true
		close(b.calls)
	}
	b.mu.Unlock()
	<-b.done
}

func (b *batcher) loop() {
	defer close(b.done)
	for first := range b.calls {
		batch := []*call{first}
	drain:
		for len(batch) < b.max {
			select {
			case c, ok := <-b.calls:
				if !ok {
					break drain
				}
				batch = append(batch, c)
			default:
				break drain
			}
		}
		b.commit(batch)
	}
}

// commit runs the calls in order in one transaction. A call whose fn fails
// gets its error and is dropped, and the rest run again without it, so
// every call sees exactly the writes of the calls before it that succeed.
func (b *batcher) commit(batch []*call) {
	for len(batch) > 0 {
		failed := -1
		var failErr error
		err := b.db.Update(func(tx *bolt.Tx) error {
			t := &Tx{tx: tx} // one for all calls: it tracks the writes for pack.go
			for i, c := range batch {
				if err := c.fn(t); err != nil {
					failed, failErr = i, err
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			batch[failed].err <- failErr
			batch = append(batch[:failed], batch[failed+1:]...)
			continue
		}
		for _, c := range batch {
			c.err <- err
		}
		return
	}
}
