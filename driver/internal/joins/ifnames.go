package joins

import "sync"

// IfNames are the container interface names endpoints asked for
// (com.docker.network.endpoint.ifname), from CreateEndpoint to their
// Join, kept in memory only: the state file's format stays as older
// versions read it. A daemon restarted between an endpoint's
// CreateEndpoint and its Join forgets the name, and the container gets
// Docker's (eth0). The zero value is ready.
type IfNames struct {
	mu sync.Mutex
	by map[string]string
}

// Set remembers (or, with "", forgets) an endpoint's name.
func (n *IfNames) Set(ep, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == "" {
		delete(n.by, ep)
		return
	}
	if n.by == nil {
		n.by = map[string]string{}
	}
	n.by[ep] = name
}

// Get is the name an endpoint asked for; "" when none.
func (n *IfNames) Get(ep string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.by[ep]
}
