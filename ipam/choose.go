package ipam

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/underlay-net/underlay/store"
)

// Which address a RequestAddress without an address gets, and which
// remembered names are forgotten: pure functions over a snapshot that
// address.go reads in the transaction that records the result.
//
// Sticky addresses by name (issue 25 §3): current engines send the
// endpoint's name (com.docker.network.endpoint.name) with RequestAddress.
// A name gets the address it last had in the subnet (the pool's, or a
// re-created pool's of the same address space and subnet) when it is free;
// any other request gets the lowest address no name is remembered for;
// only when none is left does it get a remembered one, the one least
// recently used, whose name is then forgotten (as DHCP servers reuse
// expired leases last).

// keyEndpointName is the option libnetwork's current versions add to
// RequestAddress: the endpoint's (the container's) name on the network.
const keyEndpointName = "com.docker.network.endpoint.name"

const (
	// nameTTL is how long a name's address is remembered after its last
	// use (its release, or its hand-out while held).
	nameTTL = 30 * 24 * time.Hour
	// namesPerSubnet bounds the names remembered per subnet: past it, the
	// least recently used one not held is forgotten.
	namesPerSubnet = 4096
)

// addrKind says why an address was chosen.
type addrKind string

const (
	kindSticky     addrKind = "sticky"     // the name's remembered address
	kindNeverUsed  addrKind = "never-used" // no name is remembered for it
	kindRemembered addrKind = "remembered" // another name's, none never-used left
)

// pickInput is the snapshot chooseAddress decides over.
type pickInput struct {
	Pool, Range netip.Prefix
	// Taken reports addresses that may not be handed out now: allocated,
	// the host's own, the gateway, in use on the LAN, being probed for
	// another request.
	Taken func(netip.Addr) bool
	// Sticky is the requesting name's remembered address; zero for none
	// (or no name).
	Sticky netip.Addr
	// Remembered reports whether an address is remembered for a name
	// (not expired), and when it was last used.
	Remembered func(netip.Addr) (time.Time, bool)
}

// chooseAddress picks the name's sticky address when it is usable, in the
// pool's range and not taken; else the lowest usable address that is
// neither taken nor remembered; else the remembered one not taken that
// was least recently used (the lowest of equals).
func chooseAddress(in pickInput) (netip.Addr, addrKind, error) {
	if s := in.Sticky; s.IsValid() && usable(in.Pool, s) && (!in.Range.IsValid() || in.Range.Contains(s)) && !in.Taken(s) {
		return s, kindSticky, nil
	}
	var oldest netip.Addr
	var oldestAt time.Time
	a, err := pickAddress(in.Pool, in.Range, func(a netip.Addr) bool {
		if in.Taken(a) {
			return true
		}
		if at, ok := in.Remembered(a); ok {
			if !oldest.IsValid() || at.Before(oldestAt) {
				oldest, oldestAt = a, at
			}
			return true
		}
		return false
	})
	switch {
	case err == nil:
		return a, kindNeverUsed, nil
	case oldest.IsValid():
		return oldest, kindRemembered, nil
	}
	return netip.Addr{}, "", err
}

// nameLive reports whether a name's record still counts at now: its
// address last used less than ttl ago, or held now.
func nameLive(n store.IPAMName, held bool, now time.Time, ttl time.Duration) bool {
	return held || now.Sub(n.LastUsed()) < ttl
}

// pruneNames returns the names of a subnet to forget at now: those no
// longer live, then, while more than max are left, the least recently
// used of those not held (held ones are never forgotten: their address is
// in use, and the name comes back to it).
func pruneNames(names []store.IPAMName, held func(addr string) bool, now time.Time, ttl time.Duration, max int) []string {
	var out []string
	var spare []store.IPAMName
	left := 0
	for _, n := range names {
		h := held(n.Address)
		if !nameLive(n, h, now, ttl) {
			out = append(out, n.Name)
			continue
		}
		left++
		if !h {
			spare = append(spare, n)
		}
	}
	slices.SortFunc(spare, func(a, b store.IPAMName) int {
		if c := a.LastUsed().Compare(b.LastUsed()); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := 0; left > max && i < len(spare); i++ {
		out = append(out, spare[i].Name)
		left--
	}
	return out
}
