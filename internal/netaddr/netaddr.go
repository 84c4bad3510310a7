// Package netaddr parses addresses as Docker's requests spell them.
package netaddr

import (
	"net/netip"
	"strings"
)

// Parse accepts an address with or without a prefix length.
func Parse(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Addr(), err
	}
	return netip.ParseAddr(s)
}
