package driver

import (
	"sync"

	"github.com/underlay-net/underlay/store"
)

// A join lasts until its container stops or the host boots. For most
// networks nothing about it needs the state file: the link is made again
// by the next Join, the kernel ends it at a reboot, and Docker never joins
// an endpoint it has joined until it left. So Join and Leave commit
// nothing for them: the join (sandbox and boot) is kept in memory, where it
// serves the one check that reads it during the daemon's life (a second
// Join while the link is in a sandbox is refused), `underlay ls`, and the
// parent-move decision. Networks with a host address are the exception:
// the host's /32 route to every joined endpoint must come back after a
// daemon restart, so their joins are committed in the endpoint's record as
// before. Records written by older versions may carry a join too; Leave
// clears it.
//
// What a restart of the daemon forgets: the joins of networks without a
// host address. Until the endpoint leaves, a second Join of such an
// endpoint is then not refused; `underlay ls` shows it as not joined.

// joinTable holds the joins kept in memory, by endpoint ID.
type joinTable struct {
	mu sync.Mutex
	m  map[string]join
}

type join struct{ sandbox, boot string }

func newJoinTable() *joinTable { return &joinTable{m: map[string]join{}} }

func (j *joinTable) set(epID, sandbox, boot string) {
	j.mu.Lock()
	j.m[epID] = join{sandbox, boot}
	j.mu.Unlock()
}

func (j *joinTable) drop(epID string) {
	j.mu.Lock()
	delete(j.m, epID)
	j.mu.Unlock()
}

// overlay returns ep with its join filled in from memory when its record
// has none.
func (j *joinTable) overlay(ep store.Endpoint) store.Endpoint {
	if ep.Sandbox != "" {
		return ep
	}
	j.mu.Lock()
	in, ok := j.m[ep.ID]
	j.mu.Unlock()
	if ok {
		ep.Sandbox, ep.Boot = in.sandbox, in.boot
	}
	return ep
}

// overlayAll is overlay over a list, in place.
func (j *joinTable) overlayAll(eps []store.Endpoint) []store.Endpoint {
	for i := range eps {
		eps[i] = j.overlay(eps[i])
	}
	return eps
}

// durableJoin reports whether a network's joins are committed.
func durableJoin(n store.Network) bool { return n.HostAddress != "" }
