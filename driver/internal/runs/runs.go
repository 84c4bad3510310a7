// Package runs holds background runs by key (an endpoint's ID): a run
// lasts until it returns, until a later run of its key starts, or until
// Stop ends its key's run, so a request can end what an earlier one left
// running (Leave ends a Join's announcements and its read of the
// interface in the container).
package runs

import (
	"context"
	"sync"
)

// Set is the runs under way. Its zero value is empty and ready.
type Set struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	running sync.WaitGroup
	closed  bool // StopAll was called: nothing starts any more
}

// Start runs run in the background with a context that ends when key's
// run is stopped or replaced, after ending key's earlier run. After
// StopAll it starts nothing.
func (s *Set) Start(key string, run func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.cancels == nil {
		s.cancels = map[string]context.CancelFunc{}
	}
	if cancel, ok := s.cancels[key]; ok {
		cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancels[key] = cancel
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		run(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		if ctx.Err() == nil { // still key's run: not replaced, not stopped
			cancel()
			delete(s.cancels, key)
		}
	}()
}

// Stop ends key's run, if one is under way, without waiting for it.
func (s *Set) Stop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel, ok := s.cancels[key]; ok {
		cancel()
		delete(s.cancels, key)
	}
}

// Running is how many keys have a run that was neither stopped nor
// replaced and has not returned (a stopped run may still be returning).
func (s *Set) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cancels)
}

// StopAll ends every run and waits for them to return; nothing starts
// after it.
func (s *Set) StopAll() {
	s.mu.Lock()
	s.closed = true
	for key, cancel := range s.cancels {
		cancel()
		delete(s.cancels, key)
	}
	s.mu.Unlock()
	s.running.Wait()
}
