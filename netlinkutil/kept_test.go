package netlinkutil

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// AddrsNear's index answers what a scan of every address would: the
// addresses whose subnet overlaps the pool, for pools wider and narrower
// than its buckets, on hosts with few and many buckets.
func TestNearAnswersAsAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, hostSize := range []int{3, 40, 3000} {
		s := &kept{addrs: map[int]map[netip.Prefix]struct{}{}, bySubnet: map[netip.Prefix]map[kernel.Addr]struct{}{}, byBucket: map[netip.Prefix]map[kernel.Addr]struct{}{}}
		var all []kernel.Addr
		for i := range hostSize {
			var a kernel.Addr
			if i%3 == 2 {
				a = kernel.Addr{Prefix: netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x:%x::%x/%d", rng.IntN(4), rng.IntN(8), 1+rng.IntN(200), []int{48, 56, 64, 120, 128}[rng.IntN(5)])), LinkIndex: 1 + rng.IntN(50)}
			} else {
				a = kernel.Addr{Prefix: netip.MustParsePrefix(fmt.Sprintf("198.%d.%d.%d/%d", 18+rng.IntN(2), rng.IntN(40), 1+rng.IntN(250), []int{8, 15, 16, 20, 24, 28, 32}[rng.IntN(7)])), LinkIndex: 1 + rng.IntN(50)}
			}
			if _, dup := s.addrs[a.LinkIndex][a.Prefix]; dup {
				continue
			}
			s.putAddr(a)
			all = append(all, a)
		}
		// Some removed again: the index forgets them.
		for _, a := range all[:len(all)/4] {
			s.dropAddr(a)
		}
		all = all[len(all)/4:]
		pools := []string{"198.18.0.0/15", "198.18.0.0/16", "198.18.3.0/24", "198.19.7.0/22", "198.18.5.16/28", "198.18.9.9/32", "10.0.0.0/8", "0.0.0.0/0",
			"2001:db8::/32", "2001:db8:1::/48", "2001:db8:2:3::/64", "2001:db8:1:2::/96", "2001:db8:0:1::/60", "::/0"}
		for _, p := range pools {
			pool := netip.MustParsePrefix(p)
			var want []kernel.Addr
			for _, a := range all {
				if a.Prefix.Masked().Overlaps(pool) {
					want = append(want, a)
				}
			}
			sortAddrs(want)
			if got := s.near(pool); !slices.Equal(got, want) {
				t.Errorf("host of %d addresses, pool %s: near gives %d addresses, a scan %d; near only: %v; scan only: %v",
					hostSize, pool, len(got), len(want), minus(got, want), minus(want, got))
			}
		}
	}
}

func minus(a, b []kernel.Addr) []kernel.Addr {
	var out []kernel.Addr
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
