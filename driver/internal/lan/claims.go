package lan

import (
	"net/netip"
	"sync"
)

// Claims are the addresses DHCP creates in flight are checking, so that
// two of them offered the same address (a server that offers one to
// everyone) do not both take it. The zero value is ready.
type Claims struct {
	mu sync.Mutex
	by map[claimKey]string // -> endpoint ID
}

type claimKey struct {
	parent string
	addr   netip.Addr
}

// Claim takes addr on parent for endpoint; false when another endpoint's
// create holds it.
func (c *Claims) Claim(parent string, addr netip.Addr, endpoint string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[claimKey]string{}
	}
	k := claimKey{parent, addr}
	if other, ok := c.by[k]; ok && other != endpoint {
		return false
	}
	c.by[k] = endpoint
	return true
}

// Release gives back endpoint's claim of addr on parent.
func (c *Claims) Release(parent string, addr netip.Addr, endpoint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by[claimKey{parent, addr}] == endpoint {
		delete(c.by, claimKey{parent, addr})
	}
}
