package links

import (
	"log/slog"
	"sync"
	"time"
)

// SelfDeletions remembers the links underlay itself is deleting, by index,
// so the repair watcher does not take their announcements for repairs to
// make. Entries not claimed within a minute (no watcher runs, the event
// was lost) are dropped. The zero value is ready.
type SelfDeletions struct {
	mu sync.Mutex
	at map[int]time.Time
	// added are the adds in their order, the oldest first: each add drops
	// the entries older than a minute from the front, in time proportional
	// to what it drops (not to what is kept: a host deleting links by the
	// hundred a second keeps tens of thousands).
	added []selfDeletion
}

type selfDeletion struct {
	index int
	at    time.Time
}

// Add remembers that underlay deletes the link with this index now.
func (s *SelfDeletions) Add(index int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[int]time.Time{}
	}
	for len(s.added) > 0 && now.Sub(s.added[0].at) > time.Minute {
		old := s.added[0]
		if t, ok := s.at[old.index]; ok && t.Equal(old.at) { // not added again since
			delete(s.at, old.index)
		}
		s.added = s.added[1:]
	}
	s.at[index] = now
	s.added = append(s.added, selfDeletion{index, now})
}

// Claim reports whether underlay deleted the link with this index itself,
// forgetting it.
func (s *SelfDeletions) Claim(index int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[index]
	delete(s.at, index)
	return ok
}

// FailureLog logs a repair step's failure once per link and message: a
// parent gone for good fails every pass the same way, and one line per
// state change is enough (the repeats go to debug).
type FailureLog struct {
	mu   sync.Mutex
	last map[string]string
}

// Warn logs msg and err for link at WARN, or at DEBUG when it is what was
// logged for link last.
func (f *FailureLog) Warn(log *slog.Logger, link, msg string, err error) {
	f.mu.Lock()
	text := msg + ": " + err.Error()
	repeat := f.last[link] == text
	if f.last == nil {
		f.last = map[string]string{}
	}
	f.last[link] = text
	f.mu.Unlock()
	if repeat {
		log.Debug(msg+" (again)", "error", err)
		return
	}
	log.Warn(msg, "error", err)
}

// Clear forgets a link's failure once its step succeeded.
func (f *FailureLog) Clear(link string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.last, link)
}
