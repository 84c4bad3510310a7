package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

func base(prefix string, size int) Base { return Base{Prefix: pfx(prefix), Size: size} }

func TestPickPool(t *testing.T) {
	v4 := []Base{base("192.168.0.0/16", 24), base("172.16.0.0/12", 24)} // out of order on purpose
	for _, tc := range []struct {
		name  string
		bases []Base
		v6    bool
		size  int
		taken []netip.Prefix
		want  string // "" means exhausted
	}{
		{name: "empty: lowest block of the lowest base", bases: v4, want: "172.16.0.0/24"},
		{name: "taken bigger than a block", bases: v4, taken: pfxs("172.16.0.0/16"), want: "172.17.0.0/24"},
		{name: "taken smaller than a block", bases: v4, taken: pfxs("172.16.0.5/32"), want: "172.16.1.0/24"},
		{name: "taken unmasked", bases: v4, taken: pfxs("172.16.0.77/23"), want: "172.16.2.0/24"},
		{name: "taken in a row, unsorted", bases: v4, taken: pfxs("172.16.2.0/23", "172.16.0.0/24", "172.16.1.128/25"), want: "172.16.4.0/24"},
		{name: "taken inside a later block only", bases: v4, taken: pfxs("172.16.1.9/32"), want: "172.16.0.0/24"},
		{name: "taken covers the base from below its edge", bases: v4, taken: pfxs("172.0.0.0/8"), want: "192.168.0.0/24"},
		{name: "taken covers everything", bases: v4, taken: pfxs("128.0.0.0/1"), want: ""},
		{name: "taken in the other family is ignored", bases: v4, taken: pfxs("::/0", "::ffff:172.16.0.0/120"), want: "172.16.0.0/24"},
		{name: "default route prefix would take everything (callers drop it)", bases: v4, taken: pfxs("0.0.0.0/0"), want: ""},
		{name: "size bigger than the base default", bases: v4, size: 16, taken: pfxs("172.16.255.1/32"), want: "172.17.0.0/16"},
		{name: "size smaller than the base default", bases: v4, size: 28, taken: pfxs("172.16.0.0/28", "172.16.0.17/32"), want: "172.16.0.32/28"},
		{name: "size larger than a base skips it", bases: []Base{base("10.0.0.0/24", 28), base("172.16.0.0/12", 24)}, size: 20, want: "172.16.0.0/20"},
		{name: "size larger than every base", bases: v4, size: 8, want: ""},
		{name: "size longer than the family", bases: v4, size: 33, want: ""},
		{name: "negative size", bases: v4, size: -1, want: ""},
		{name: "each base its own size", bases: []Base{base("10.0.0.0/24", 28), base("172.16.0.0/12", 24)}, taken: pfxs("10.0.0.0/24"), want: "172.16.0.0/24"},
		{name: "own size of the first base", bases: []Base{base("10.0.0.0/24", 28), base("172.16.0.0/12", 24)}, taken: pfxs("10.0.0.0/28"), want: "10.0.0.16/28"},
		{name: "last block of a base", bases: []Base{base("10.0.0.0/23", 24)}, taken: pfxs("10.0.0.0/24"), want: "10.0.1.0/24"},
		{name: "exhausted by small prefixes", bases: []Base{base("10.0.0.0/24", 25)}, taken: pfxs("10.0.0.1/32", "10.0.0.200/32"), want: ""},
		{name: "base at the top of the space", bases: []Base{base("255.255.255.0/24", 28)}, taken: pfxs("255.255.255.0/28"), want: "255.255.255.16/28"},
		{name: "top of the space taken: no overflow", bases: []Base{base("255.255.255.0/24", 28)}, taken: pfxs("255.255.255.0/25", "255.255.255.128/25"), want: ""},
		{name: "whole space base", bases: []Base{base("0.0.0.0/0", 1)}, taken: pfxs("0.0.0.0/1"), want: "128.0.0.0/1"},
		{name: "whole space base exhausted at its end", bases: []Base{base("0.0.0.0/0", 1)}, taken: pfxs("0.0.0.0/1", "255.255.255.255/32"), want: ""},
		{name: "zero base ignored", bases: []Base{{}, base("10.0.0.0/8", 24)}, want: "10.0.0.0/24"},
		{name: "only a zero base", bases: []Base{{Size: 0}}, want: ""},
		{name: "no bases", want: ""},
		{name: "IPv6 /48 base, /64 pools", bases: append([]Base{base("fd00:1::/48", 64)}, v4...), v6: true, want: "fd00:1::/64"},
		{name: "IPv6 jumps over taken", bases: []Base{base("fd00:1::/48", 64)}, v6: true,
			taken: pfxs("fd00:1::/64", "fd00:1:0:1::1/128", "fd00:1:0:2::/63", "172.16.0.0/12"), want: "fd00:1:0:4::/64"},
		{name: "IPv6 base order", bases: []Base{base("fd00:2::/48", 64), base("fd00:1::/48", 64)}, v6: true, taken: pfxs("fd00:1::/48"), want: "fd00:2::/64"},
		{name: "IPv6 asked, only IPv4 bases", bases: v4, v6: true, want: ""},
		{name: "IPv4 asked, only IPv6 bases", bases: []Base{base("fd00:1::/48", 64)}, want: ""},
		{name: "IPv6 exhausted", bases: []Base{base("fd00:1::/62", 64)}, v6: true, taken: pfxs("fd00:1::/63", "fd00:1:0:2::/64", "fd00:1:0:3::9/128"), want: ""},
		{name: "IPv6 whole space, size 1", bases: []Base{base("::/0", 1)}, v6: true, taken: pfxs("::/1", "ffff::/16"), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bases := append([]Base(nil), tc.bases...)
			taken := append([]netip.Prefix(nil), tc.taken...)
			got, err := pickPool(bases, tc.v6, tc.size, taken)
			if tc.want == "" {
				if !errors.Is(err, errExhausted) {
					t.Fatalf("pickPool = %v, %v; want exhausted", got, err)
				}
				return
			}
			if err != nil || got != pfx(tc.want) {
				t.Fatalf("pickPool = %v, %v; want %s", got, err, tc.want)
			}
			for i := range tc.bases {
				if bases[i] != tc.bases[i] {
					t.Fatal("pickPool reordered its caller's bases")
				}
			}
			for i := range tc.taken {
				if taken[i] != tc.taken[i] {
					t.Fatal("pickPool reordered its caller's taken prefixes")
				}
			}
		})
	}
}

func TestPickAddressAndUsable(t *testing.T) {
	usedSet := func(ss ...string) func(netip.Addr) bool {
		m := map[netip.Addr]bool{}
		for _, s := range ss {
			m[netip.MustParseAddr(s)] = true
		}
		return func(a netip.Addr) bool { return m[a] }
	}
	for _, tc := range []struct {
		name string
		pool string
		rng  string
		used []string
		want string // "" means none left
	}{
		{name: "/24 skips the network address", pool: "10.0.0.0/24", want: "10.0.0.1"},
		{name: "used ones skipped", pool: "10.0.0.0/24", used: []string{"10.0.0.1", "10.0.0.2", "10.0.0.4"}, want: "10.0.0.3"},
		{name: "broadcast never handed out", pool: "10.0.0.0/30", used: []string{"10.0.0.1", "10.0.0.2"}, want: ""},
		{name: "/31: both addresses", pool: "10.0.0.0/31", want: "10.0.0.0"},
		{name: "/31: the second", pool: "10.0.0.0/31", used: []string{"10.0.0.0"}, want: "10.0.0.1"},
		{name: "/32: the address", pool: "10.0.0.7/32", want: "10.0.0.7"},
		{name: "/32 used", pool: "10.0.0.7/32", used: []string{"10.0.0.7"}, want: ""},
		{name: "unmasked pool", pool: "10.0.0.77/24", want: "10.0.0.1"},
		{name: "IPv6 skips the subnet-router anycast", pool: "2001:db8::/64", want: "2001:db8::1"},
		{name: "IPv6 has no broadcast", pool: "2001:db8::/126", used: []string{"2001:db8::1", "2001:db8::2"}, want: "2001:db8::3"},
		{name: "IPv6 /127: both", pool: "2001:db8::/127", want: "2001:db8::"},
		{name: "IPv6 /128", pool: "2001:db8::5/128", want: "2001:db8::5"},
		{name: "range at the start", pool: "10.0.0.0/24", rng: "10.0.0.0/25", want: "10.0.0.1"},
		{name: "range in the middle", pool: "10.0.0.0/24", rng: "10.0.0.128/26", want: "10.0.0.128"},
		{name: "range used up", pool: "10.0.0.0/24", rng: "10.0.0.128/30", used: []string{"10.0.0.128", "10.0.0.129", "10.0.0.130", "10.0.0.131"}, want: ""},
		{name: "range at the end stops before broadcast", pool: "10.0.0.0/24", rng: "10.0.0.252/30", used: []string{"10.0.0.252", "10.0.0.253", "10.0.0.254"}, want: ""},
		{name: "range wider than the pool", pool: "10.0.0.0/24", rng: "10.0.0.0/8", used: []string{"10.0.0.1"}, want: "10.0.0.2"},
		{name: "range wider than the pool, pool used up", pool: "10.0.0.0/30", rng: "10.0.0.0/8", used: []string{"10.0.0.1", "10.0.0.2"}, want: ""},
		{name: "range outside the pool", pool: "10.0.0.0/24", rng: "10.0.1.0/25", want: ""},
		{name: "range of the other family", pool: "10.0.0.0/24", rng: "2001:db8::/32", want: ""},
		{name: "IPv6 range", pool: "2001:db8::/64", rng: "2001:db8::100/120", want: "2001:db8::100"},
		{name: "invalid pool", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool, rng netip.Prefix
			if tc.pool != "" {
				pool = pfx(tc.pool)
			}
			if tc.rng != "" {
				rng = pfx(tc.rng)
			}
			got, err := pickAddress(pool, rng, usedSet(tc.used...))
			if tc.want == "" {
				if !errors.Is(err, errExhausted) {
					t.Fatalf("pickAddress = %v, %v; want none left", got, err)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("pickAddress = %v, %v; want %s", got, err, tc.want)
			}
			if !usable(pool, got) {
				t.Fatalf("picked %s, which usable refuses", got)
			}
		})
	}

	for _, tc := range []struct {
		pool, addr string
		want       bool
	}{
		{"10.0.0.0/24", "10.0.0.0", false},
		{"10.0.0.0/24", "10.0.0.255", false},
		{"10.0.0.0/24", "10.0.0.1", true},
		{"10.0.0.0/24", "10.0.0.254", true},
		{"10.0.0.0/24", "10.0.1.1", false},
		{"10.0.0.0/24", "::ffff:10.0.0.1", false},
		{"10.0.0.0/30", "10.0.0.3", false},
		{"10.0.0.0/31", "10.0.0.0", true},
		{"10.0.0.0/31", "10.0.0.1", true},
		{"10.0.0.1/32", "10.0.0.1", true},
		{"0.0.0.0/0", "0.0.0.0", false},
		{"0.0.0.0/0", "255.255.255.255", false},
		{"2001:db8::/64", "2001:db8::", false},
		{"2001:db8::/64", "2001:db8::ffff:ffff:ffff:ffff", true}, // no broadcast in IPv6
		{"2001:db8::/127", "2001:db8::", true},
		{"2001:db8::/64", "10.0.0.1", false},
	} {
		if got := usable(pfx(tc.pool), netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("usable(%s, %s) = %v, want %v", tc.pool, tc.addr, got, tc.want)
		}
	}

	for pool, want := range map[string]string{
		"10.0.0.0/24": "10.0.0.1", "10.0.0.0/31": "10.0.0.0", "10.0.0.9/32": "10.0.0.9", "2001:db8::/64": "2001:db8::1",
	} {
		if got := firstUsable(pfx(pool)); got != netip.MustParseAddr(want) {
			t.Errorf("firstUsable(%s) = %v, want %s", pool, got, want)
		}
	}
}

func TestLastAddr(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"0.0.0.0/0", "255.255.255.255"},
		{"10.1.2.3/32", "10.1.2.3"},
		{"10.1.2.3/8", "10.255.255.255"},
		{"10.0.0.0/31", "10.0.0.1"},
		{"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{"2001:db8::/64", "2001:db8::ffff:ffff:ffff:ffff"},
		{"2001:db8::1/128", "2001:db8::1"},
	} {
		if got := lastAddr(pfx(tc.prefix)); got != netip.MustParseAddr(tc.want) {
			t.Errorf("lastAddr(%s) = %v, want %s", tc.prefix, got, tc.want)
		}
	}
	if got := lastAddr(netip.Prefix{}); got.IsValid() {
		t.Errorf("lastAddr of the zero prefix = %v", got)
	}
}

func TestDescribeBases(t *testing.T) {
	bases := []Base{base("172.16.0.0/12", 24), base("fd00:1::/48", 64), base("10.0.0.0/8", 20)}
	if got := describeBases(bases, false); got != "base=172.16.0.0/12,size=24 base=10.0.0.0/8,size=20" {
		t.Errorf("IPv4: %q", got)
	}
	if got := describeBases(bases, true); got != "base=fd00:1::/48,size=64" {
		t.Errorf("IPv6: %q", got)
	}
	if got := describeBases(nil, true); got != "none" {
		t.Errorf("none: %q", got)
	}
}

// FuzzPickPool checks, for any base, size and taken prefixes, that pickPool
// does not panic and that what it picks is a block of a base of the family,
// of the asked size, free, and the lowest such block (brute force over
// small bases).
func FuzzPickPool(f *testing.F) {
	f.Add("172.16.0.0/12", 24, "172.16.0.0/16", "172.17.0.5/32", 0, false)
	f.Add("10.0.0.0/23", 24, "10.0.0.0/24", "0.0.0.0/0", 25, false)
	f.Add("0.0.0.0/0", 1, "255.255.255.255/32", "0.0.0.0/1", 0, false)
	f.Add("fd00:1::/48", 64, "fd00:1::/64", "fd00:1:0:1::1/128", 0, true)
	f.Add("::/0", 0, "::/1", "", 0, true)
	f.Add("", 0, "", "", 0, false)
	f.Fuzz(func(t *testing.T, baseS string, baseSize int, t1, t2 string, size int, v6 bool) {
		var b Base
		b.Prefix, _ = netip.ParsePrefix(baseS)
		b.Prefix = b.Prefix.Masked()
		b.Size = baseSize
		var taken []netip.Prefix
		for _, s := range []string{t1, t2} {
			if p, err := netip.ParsePrefix(s); err == nil {
				taken = append(taken, p)
			}
		}
		got, err := pickPool([]Base{b}, v6, size, taken)
		if err != nil {
			if !errors.Is(err, errExhausted) {
				t.Fatalf("error %v does not wrap errExhausted", err)
			}
		} else {
			bits := size
			if bits == 0 {
				bits = b.Size
			}
			if !b.Prefix.IsValid() || b.Prefix.Addr().Is6() != v6 || got.Bits() != bits || got != got.Masked() ||
				!b.Prefix.Contains(got.Addr()) || got.Bits() < b.Prefix.Bits() {
				t.Fatalf("pickPool(%v, v6=%v, %d, %v) = %v: not a block of the base", b, v6, size, taken, got)
			}
			for _, p := range taken {
				if p.Overlaps(got) {
					t.Fatalf("pickPool(%v, %d, %v) = %v overlaps taken %v", b, size, taken, got, p)
				}
			}
		}
		// Brute force on small bases: the first free block is what was
		// picked (or none is free).
		bits := size
		if bits == 0 {
			bits = b.Size
		}
		if !b.Prefix.IsValid() || b.Prefix.Addr().Is6() != v6 || bits < b.Prefix.Bits() || bits > b.Prefix.Addr().BitLen() || bits-b.Prefix.Bits() > 10 {
			return
		}
		var first netip.Prefix
		for a := b.Prefix.Addr(); a.IsValid() && b.Prefix.Contains(a); {
			cand := netip.PrefixFrom(a, bits)
			free := true
			for _, p := range taken {
				free = free && !p.Overlaps(cand)
			}
			if free {
				first = cand
				break
			}
			a = lastAddr(cand).Next()
		}
		if first != got {
			t.Fatalf("pickPool(%v, %d, %v) = %v, %v; brute force finds %v", b, size, taken, got, err, first)
		}
	})
}

// FuzzParsePoolRequest checks that any RequestPool either is refused with
// an ErrInvalid naming what is wrong or yields a consistent request.
func FuzzParsePoolRequest(f *testing.F) {
	f.Add(LocalSpace, "10.0.0.0/24", "10.0.0.128/25", "size", "24", "parent", "eth0", false)
	f.Add("", "", "", "size", "/26", "com.docker.network.ipam.x", "y", false)
	f.Add(GlobalSpace, "2001:db8::/64", "2001:db8::/120", "parent", "eth0", "", "", true)
	f.Add("other", "::ffff:10.0.0.0/120", "10.0.0.0/8", "foo", "bar", "size", "8", true)
	f.Add(LocalSpace, "", "10.0.0.0/24", "parent", "", "size", "", false)
	f.Fuzz(func(t *testing.T, space, pool, subPool, k1, v1, k2, v2 string, v6 bool) {
		opts := map[string]string{k1: v1, k2: v2}
		bases := []Base{base("172.16.0.0/12", 24), base("fd00:1::/48", 64)}
		r, err := parsePoolRequest(space, pool, subPool, opts, v6, bases)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid request") {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		if r.Space != LocalSpace && r.Space != GlobalSpace {
			t.Fatalf("accepted space %q", r.Space)
		}
		width := map[bool]int{false: 32, true: 128}[v6]
		if r.Pool.IsValid() && (r.Pool != r.Pool.Masked() || r.Pool.Addr().Is6() != v6 || r.Pool.Addr().Is4In6()) {
			t.Fatalf("accepted pool %v for v6=%v", r.Pool, v6)
		}
		if r.Range.IsValid() {
			if r.Range != r.Range.Masked() || r.Range.Addr().Is6() != v6 {
				t.Fatalf("accepted range %v", r.Range)
			}
			if r.Pool.IsValid() && (!r.Pool.Contains(r.Range.Addr()) || r.Range.Bits() < r.Pool.Bits()) {
				t.Fatalf("accepted range %v outside pool %v", r.Range, r.Pool)
			}
			if !r.Pool.IsValid() && r.Parent == "" {
				t.Fatalf("accepted range %v for an automatic pool", r.Range)
			}
		}
		if r.Size != 0 && (r.Size < 1 || r.Size > width-2 || r.Pool.IsValid() || r.Parent != "") {
			t.Fatalf("accepted size %d (pool %v, parent %q)", r.Size, r.Pool, r.Parent)
		}
		if r.Parent != "" && v6 && !r.Pool.IsValid() {
			t.Fatalf("accepted parent %q for an automatic IPv6 pool", r.Parent)
		}
		for k := range opts {
			if k != OptParent && k != OptSize && !strings.HasPrefix(k, dockerKeyPrefix) {
				t.Fatalf("accepted option %q", k)
			}
		}
	})
}
