package ipam

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBase(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  Base
		words []string // refused naming these
	}{
		{in: "base=172.16.0.0/12,size=24", want: base("172.16.0.0/12", 24)},
		{in: " size=26 , base=10.0.0.0/8 ", want: base("10.0.0.0/8", 26)},
		{in: "base=fd00:1::/48,size=64", want: base("fd00:1::/48", 64)},
		{in: "base=10.0.0.0/8,size=8", want: base("10.0.0.0/8", 8)},
		{in: "base=10.0.0.0/8,size=30", want: base("10.0.0.0/8", 30)},
		{in: "base=10.0.0.0/8,size=31", words: []string{"size 31", "from 8", "to 30"}},
		{in: "base=10.0.0.0/8,size=7", words: []string{"size 7", "from 8"}},
		{in: "base=fd00::/48,size=127", words: []string{"size 127", "126"}},
		{in: "base=10.0.0.1/8,size=24", words: []string{"host bits", "10.0.0.0/8"}},
		{in: "base=10.0.0.0,size=24", words: []string{`"10.0.0.0"`, "CIDR"}},
		{in: "base=::ffff:10.0.0.0/104,size=120", words: []string{"IPv4-mapped"}},
		{in: "base=10.0.0.0/8,size=x", words: []string{`"x"`, "not a number"}},
		{in: "base=10.0.0.0/8", words: []string{"both base and size"}},
		{in: "size=24", words: []string{"both base and size"}},
		{in: "base=10.0.0.0/8,size=24,color=red", words: []string{`"color"`, "base=CIDR,size=N"}},
		{in: "base=10.0.0.0/8,size=24,", words: []string{"not key=value"}},
		{in: "", words: []string{"not key=value"}},
	} {
		got, err := ParseBase(tc.in)
		if tc.words == nil {
			if err != nil || got != tc.want {
				t.Errorf("ParseBase(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseBase(%q) = %v; want an error", tc.in, got)
			continue
		}
		for _, w := range append(tc.words, fmt.Sprintf("%q", tc.in)) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseBase(%q): error %q does not mention %q", tc.in, err, w)
			}
		}
	}

	bases, err := ParseBases("  base=10.0.0.0/8,size=24\tbase=fd00:1::/48,size=64 ")
	if err != nil || len(bases) != 2 || bases[1] != base("fd00:1::/48", 64) {
		t.Fatalf("ParseBases = %v, %v", bases, err)
	}
	if bases, err := ParseBases(""); err != nil || bases != nil {
		t.Fatalf("ParseBases of nothing = %v, %v", bases, err)
	}
	if _, err := ParseBases("base=10.0.0.0/8,size=24 base=nope,size=1"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("ParseBases with a bad entry: %v", err)
	}
	if d := DefaultBases(); len(d) != 1 || d[0] != base("172.16.0.0/12", 24) {
		t.Fatalf("DefaultBases = %v", d)
	}
}

func TestReadNameservers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	content := "# generated\nsearch example.org\nnameserver 127.0.0.53\n  nameserver\t10.0.0.2  # office\nnameserver fe80::1%eth0\nnameserver ::ffff:192.0.2.1\nnameserver bogus\nnameserver\n;nameserver 10.9.9.9\noptions edns0\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	got := ReadNameservers(path)
	want := []netip.Addr{netip.MustParseAddr("127.0.0.53"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("192.0.2.1")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ReadNameservers = %v, want %v", got, want)
	}
	if got := ReadNameservers(filepath.Join(t.TempDir(), "missing")); got != nil {
		t.Fatalf("missing file: %v", got)
	}
}
