package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"strings"
)

// The allocator: pure functions over what is taken. No kernel, no store;
// ipam.go gathers the snapshot and records the pick in the same
// transaction that read it.

// Base is a configured range that auto pools are cut from.
type Base struct {
	Prefix netip.Prefix
	// Size is the default prefix length of a pool cut from it.
	Size int
}

func (b Base) String() string { return fmt.Sprintf("base=%s,size=%d", b.Prefix, b.Size) }

// errExhausted is wrapped when no free prefix of the size is left.
var errExhausted = errors.New("no free prefix")

// pickPool returns the lowest prefix of size bits, in address order across
// the bases of the family, that overlaps none of taken. size 0 means each
// base's own size.
func pickPool(bases []Base, v6 bool, size int, taken []netip.Prefix) (netip.Prefix, error) {
	fam := familyBases(bases, v6)
	sort.Slice(fam, func(i, j int) bool { return fam[i].Prefix.Addr().Less(fam[j].Prefix.Addr()) })
	sorted := append([]netip.Prefix(nil), taken...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Addr().Less(sorted[j].Addr()) })
	for _, b := range fam {
		bits := size
		if bits == 0 {
			bits = b.Size
		}
		if bits < b.Prefix.Bits() || bits > b.Prefix.Addr().BitLen() {
			continue // a pool of that size does not fit this base
		}
		if p, ok := firstFree(b.Prefix, bits, sorted); ok {
			return p, nil
		}
	}
	return netip.Prefix{}, errExhausted
}

// familyBases are the valid bases of a family (a zero Base has no family:
// its prefix is invalid, and walking it would panic).
func familyBases(bases []Base, v6 bool) []Base {
	var out []Base
	for _, b := range bases {
		if b.Prefix.IsValid() && b.Prefix.Addr().Is6() == v6 {
			out = append(out, b)
		}
	}
	return out
}

// firstFree walks base in blocks of bits, jumping past every taken prefix
// a candidate overlaps, so it never enumerates a large base block by block.
func firstFree(base netip.Prefix, bits int, taken []netip.Prefix) (netip.Prefix, bool) {
	width := base.Addr().BitLen()
	block := new(big.Int).Lsh(big.NewInt(1), uint(width-bits))
	cur := toInt(base.Masked().Addr())
	end := toInt(lastAddr(base))
	for {
		last := new(big.Int).Sub(new(big.Int).Add(cur, block), big.NewInt(1))
		if last.Cmp(end) > 0 {
			return netip.Prefix{}, false
		}
		cand := netip.PrefixFrom(fromInt(cur, width), bits)
		var hit *netip.Prefix
		for i := range taken {
			if taken[i].Overlaps(cand) {
				hit = &taken[i]
				break
			}
		}
		if hit == nil {
			return cand, true
		}
		// Jump to the first block after the overlapping prefix (or after
		// the candidate, if the taken prefix lies inside it).
		next := new(big.Int).Add(toInt(lastAddr(*hit)), big.NewInt(1))
		next = alignUp(next, block)
		if next.Cmp(cur) <= 0 {
			next = new(big.Int).Add(cur, block)
		}
		cur = next
	}
}

// pickAddress returns the lowest address of pool (within rng when valid)
// that is usable and not used. In IPv4 the network and broadcast addresses
// of pools up to /30 are never handed out; in IPv6 the subnet-router
// anycast address (the first) is not either.
func pickAddress(pool, rng netip.Prefix, used func(netip.Addr) bool) (netip.Addr, error) {
	span := pool
	if rng.IsValid() {
		// Walk the part of the range inside the pool only: a range wider
		// than the pool, or outside it (another family, a bad record),
		// would otherwise be enumerated address by address.
		if !rng.Overlaps(pool) {
			return netip.Addr{}, fmt.Errorf("%w: range %s is not inside pool %s", errExhausted, rng, pool)
		}
		if rng.Bits() > pool.Bits() {
			span = rng
		}
	}
	for a := span.Masked().Addr(); a.IsValid() && span.Contains(a); a = a.Next() {
		if usable(pool, a) && !used(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: every address of %s is in use", errExhausted, span)
}

// usable reports whether an address of pool may be handed out at all.
func usable(pool netip.Prefix, a netip.Addr) bool {
	if !pool.Contains(a) {
		return false
	}
	if a == pool.Masked().Addr() && pool.Bits() < a.BitLen()-1 {
		return false // network address (IPv4), subnet-router anycast (IPv6)
	}
	if a.Is4() && pool.Bits() < 31 && a == lastAddr(pool) {
		return false // broadcast
	}
	return true
}

// firstUsable is the conventional gateway address of a pool.
func firstUsable(pool netip.Prefix) netip.Addr {
	a, _ := pickAddress(pool, netip.Prefix{}, func(netip.Addr) bool { return false })
	return a
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	if !p.IsValid() {
		return netip.Addr{}
	}
	width := p.Addr().BitLen()
	host := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(width-p.Bits())), big.NewInt(1))
	return fromInt(new(big.Int).Or(toInt(p.Masked().Addr()), host), width)
}

func alignUp(v, block *big.Int) *big.Int {
	r := new(big.Int).Mod(v, block)
	if r.Sign() == 0 {
		return v
	}
	return new(big.Int).Add(new(big.Int).Sub(v, r), block)
}

func toInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func fromInt(v *big.Int, width int) netip.Addr {
	b := make([]byte, width/8)
	v.FillBytes(b)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// describeBases names the configured bases of a family for messages.
func describeBases(bases []Base, v6 bool) string {
	var s []string
	for _, b := range familyBases(bases, v6) {
		s = append(s, b.String())
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
