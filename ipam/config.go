package ipam

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/internal/mdtable"
	"github.com/underlay-net/underlay/internal/probeopt"
)

// DefaultBases are the IPv4 ranges auto pools come from when none are
// configured: /24s of 172.16.0.0/12 (Docker's own default range, so the
// networks look familiar and stay clear of the 10/8 and 192.168/16 LANs
// and VPNs most hosts sit on). There is no IPv6 default: a ULA of the
// site's choosing must be configured.
func DefaultBases() []Base {
	return []Base{{Prefix: netip.MustParsePrefix("172.16.0.0/12"), Size: 24}}
}

// ParseBase parses one --default-address-pool value: base=CIDR,size=N.
func ParseBase(s string) (Base, error) {
	var b Base
	var haveBase, haveSize bool
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case !ok:
			return Base{}, fmt.Errorf("default address pool %q: %q is not key=value: use base=CIDR,size=N (for example base=172.16.0.0/12,size=24)", s, kv)
		case k == "base":
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return Base{}, fmt.Errorf("default address pool %q: base %q is not a CIDR prefix: %w", s, v, err)
			}
			if p.Addr().Is4In6() {
				return Base{}, fmt.Errorf("default address pool %q: base %s is an IPv4-mapped IPv6 prefix: give the IPv4 base (such as 172.16.0.0/12) or an IPv6 one (such as fd00:1::/48)", s, p)
			}
			if p != p.Masked() {
				return Base{}, fmt.Errorf("default address pool %q: base %s has host bits set: use %s", s, p, p.Masked())
			}
			b.Prefix, haveBase = p, true
		case k == "size":
			n, err := strconv.Atoi(v)
			if err != nil {
				return Base{}, fmt.Errorf("default address pool %q: size %q is not a number", s, v)
			}
			b.Size, haveSize = n, true
		default:
			return Base{}, fmt.Errorf("default address pool %q: unknown key %q: use base=CIDR,size=N", s, k)
		}
	}
	if !haveBase || !haveSize {
		return Base{}, fmt.Errorf("default address pool %q needs both base and size: use base=CIDR,size=N", s)
	}
	if b.Size < b.Prefix.Bits() || b.Size > b.Prefix.Addr().BitLen()-2 {
		return Base{}, fmt.Errorf("default address pool %q: size %d must be from %d (the base's length) to %d", s, b.Size, b.Prefix.Bits(), b.Prefix.Addr().BitLen()-2)
	}
	return b, nil
}

// ParseBases parses DEFAULT_ADDRESS_POOLS: entries separated by spaces.
func ParseBases(s string) ([]Base, error) {
	var out []Base
	for _, f := range strings.Fields(s) {
		b, err := ParseBase(f)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// PoolOption is one row of the IPAM option table: an --ipam-opt
// NAME=VALUE of docker network create --ipam-driver underlay. The table
// drives the validation of RequestPool (parsePoolRequest), the list of
// valid names a refusal gives, and the table of IPAM options of docs/ipam.md
// (TestDocsIPAMOptions).
type PoolOption struct {
	// Name is the option's name.
	Name string
	// Values are the valid values, as the docs word them.
	Values string
	// Default is what an absent option means, as the docs word it.
	Default string
	// Doc is the option's one-line doc, the docs' Meaning.
	Doc string
	// parse validates the value and sets it in p; given says the option
	// was given (even empty). Rows are parsed in table order, after the
	// pool and the range.
	parse func(p *poolParsing, v string, given bool) error
}

// poolParsing is the state of one parse of a RequestPool.
type poolParsing struct {
	r     *poolRequest
	bases []Base
	// dhcpAsked: dhcp=true or dhcpv6=true, of either family; dhcp4Asked:
	// dhcp=true.
	dhcpAsked, dhcp4Asked bool
}

// PoolOptions is the IPAM option table, in the docs' order.
var PoolOptions = append([]PoolOption{
	{
		Name: OptParent, Values: "one interface name or altname of the host (no list, no `auto`)",
		Default: "none: an automatic pool, or the `--subnet` given",
		Doc:     "The pool is the LAN of this interface: its connected IPv4 prefix (or the `--subnet` given) and its gateway, learned from the host. See **Pools** above.",
		parse:   parseParentOption,
	},
	sizeOption(false),
	sizeOption(true),
	{
		Name:    probeopt.Name,
		Values:  fmt.Sprintf("a duration from `0` (off) to `%s`", probeopt.Max),
		Default: fmt.Sprintf("`%s`", defaultProbe),
		Doc:     "Budget of the probe of each address of a LAN pool before it is handed out: see [On the LAN](lan.md#on-the-lan).",
		parse: func(p *poolParsing, v string, given bool) error {
			if !given {
				return nil
			}
			var err error
			p.r.Probe, err = parseAddressProbe(map[string]string{probeopt.Name: v})
			return err
		},
	},
}, dhcpOptions()...)

// parseParentOption takes --ipam-opt parent: one interface, whose LAN the
// pool is; without it, a --ip-range needs the --subnet it is in.
func parseParentOption(p *poolParsing, v string, given bool) error {
	r := p.r
	if given {
		if v == "" {
			return invalidf("--ipam-opt parent= names no interface: give the interface whose LAN the network is on (parent=eth0), or drop it")
		}
		if strings.Contains(v, ",") || v == "auto" || strings.HasPrefix(v, "auto.") {
			return invalidf("--ipam-opt parent=%s: the IPAM's parent names one interface of this host (parent=eth0); candidate lists and auto are for the driver's -o parent: give --subnet, or one interface", v)
		}
		r.Parent = v
	}
	if r.Range.IsValid() && !r.Pool.IsValid() && r.Parent == "" {
		return invalidf("--ip-range %s needs --subnet: an automatic pool is not known in advance", r.Range)
	}
	return nil
}

// sizeOption is the row of size (IPv4) or size6 (IPv6). Docker sends the
// same options with the IPv4 and the IPv6 request of a dual-stack
// network: each family reads only its own.
func sizeOption(v6 bool) PoolOption {
	key := map[bool]string{false: OptSize, true: OptSize6}[v6]
	family := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
	width := map[bool]int{false: 32, true: 128}[v6]
	return PoolOption{
		Name:    key,
		Values:  fmt.Sprintf("an %s prefix length from `1` to `%d` (`/N` too)", family, width-2),
		Default: "the base's size",
		Doc:     fmt.Sprintf("Prefix length of an automatic %s pool; refused with an %s `--subnet` or with `parent`.", family, family),
		parse: func(p *poolParsing, v string, given bool) error {
			r := p.r
			if !given || r.V6 != v6 {
				return nil
			}
			n, err := strconv.Atoi(strings.TrimPrefix(v, "/"))
			if err != nil || n < 1 || n > width-2 {
				return invalidf("--ipam-opt %s=%s is not an %s prefix length from 1 to %d", key, v, family, width-2)
			}
			if r.Pool.IsValid() {
				return invalidf("--ipam-opt %s=%s applies to automatic pools: drop it, or drop the %s --subnet", key, v, family)
			}
			if r.Parent != "" {
				return invalidf("--ipam-opt %s=%s applies to automatic pools, and parent=%s makes the pool the LAN of %s: drop one of them", key, v, r.Parent, r.Parent)
			}
			fits := false
			for _, b := range familyBases(p.bases, v6) {
				fits = fits || n >= b.Prefix.Bits()
			}
			if !fits && len(familyBases(p.bases, v6)) > 0 {
				return invalidf("--ipam-opt %s=%d is larger than every configured %s base (%s): ask for a longer prefix, or widen the bases with --default-address-pool", key, n, family, describeBases(p.bases, v6))
			}
			r.Size = n
			return nil
		},
	}
}

// PoolOptionNames lists the valid --ipam-opt names, in table order.
func PoolOptionNames() []string {
	out := make([]string, len(PoolOptions))
	for i, opt := range PoolOptions {
		out[i] = opt.Name
	}
	return out
}

// PoolOptionsMarkdown is the table of IPAM options of docs/ipam.md.
func PoolOptionsMarkdown() string {
	rows := make([]mdtable.Option, len(PoolOptions))
	for i, opt := range PoolOptions {
		rows[i] = mdtable.Option{Name: opt.Name, Values: opt.Values, Default: opt.Default, Doc: opt.Doc}
	}
	return mdtable.Options(rows)
}

// parsePoolRequest validates a RequestPool, the options row by row of the
// option table (PoolOptions). Docker's own option keys (com.docker.*) are
// passed through unread.
func parsePoolRequest(space, pool, subPool string, opts map[string]string, v6 bool, bases []Base) (poolRequest, error) {
	r := poolRequest{Space: space, V6: v6}
	switch space {
	case LocalSpace, GlobalSpace:
	case "":
		r.Space = LocalSpace
	default:
		return r, invalidf("address space %q is not underlay's: use %s or %s (docker network create --ipam-driver underlay)", space, LocalSpace, GlobalSpace)
	}
	names := PoolOptionNames()
	var unknown []string
	for k := range opts {
		if !strings.HasPrefix(k, dockerKeyPrefix) && !slices.Contains(names, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return r, invalidf("unknown --ipam-opt %q: underlay's IPAM reads %s", unknown[0], strings.Join(names, ", "))
	}
	family := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
	if pool != "" {
		p, err := netip.ParsePrefix(pool)
		if err != nil || p.Addr().Is6() != v6 || p.Addr().Is4In6() {
			return r, invalidf("pool %q is not an %s subnet in CIDR form (such as %s)", pool, family, map[bool]string{false: "198.18.1.0/24", true: "2001:db8:1::/64"}[v6])
		}
		r.Pool = p.Masked()
		if why := poolRule(r.Pool); why != "" {
			return r, invalidf("pool %s %s", r.Pool, why)
		}
	}
	if subPool != "" {
		p, err := netip.ParsePrefix(subPool)
		if err != nil || p.Addr().Is6() != v6 {
			return r, invalidf("--ip-range %q is not an %s range in CIDR form", subPool, family)
		}
		if r.Pool.IsValid() && (!r.Pool.Contains(p.Addr()) || p.Bits() < r.Pool.Bits()) {
			return r, invalidf("--ip-range %s is not inside the pool %s: pick a range inside the subnet", p, r.Pool)
		}
		r.Range = p.Masked()
	}
	ps := poolParsing{r: &r, bases: bases}
	for _, opt := range PoolOptions {
		v, given := opts[opt.Name]
		if err := opt.parse(&ps, v, given); err != nil {
			return r, err
		}
	}
	if r.Parent != "" && !r.Pool.IsValid() && v6 {
		return r, invalidf("--ipam-opt parent=%s learns only an IPv4 LAN: give the IPv6 side --subnet", r.Parent)
	}
	return r, nil
}

// ReadNameservers returns the nameserver addresses of a resolv.conf; a
// missing file has none.
func ReadNameservers(path string) []netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(strings.SplitN(fields[1], "%", 2)[0]); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}
