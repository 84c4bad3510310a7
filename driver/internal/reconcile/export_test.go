package reconcile

import "github.com/underlay-net/underlay/netlinkutil"

// Note is note, for the external tests: the watcher's keeping of an event
// it drained while a pass settled.
func (x *Executor) Note(ev netlinkutil.LinkEvent) bool { return x.note(ev) }

// ForgetSeen is what the watcher does when its subscription is made again.
func (x *Executor) ForgetSeen() { x.seen.reset() }
