package config

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/netaddr"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

func Invalidf(format string, args ...any) error { return pluginapi.Invalidf(format, args...) }

// Driver option names (com.docker.network.generic), the same as Docker's
// built-in macvlan and ipvlan drivers.
const (
	OptParent      = "parent"
	OptType        = "type"
	OptMacvlanMode = "macvlan_mode"
	OptIpvlanMode  = "ipvlan_mode"
	OptIpvlanFlag  = "ipvlan_flag"
	OptMTU         = "mtu"
	// OptHostAddress is the host's own address on the network (shim.go).
	OptHostAddress = "host_address"
)

// Top-level option keys Docker sends with CreateNetwork.
const (
	LabelGeneric    = "com.docker.network.generic"
	LabelInternal   = "com.docker.network.internal"
	labelEnableIPv6 = "com.docker.network.enable_ipv6"
)

const (
	minMTU = 68
	maxMTU = 65535
)

// The mode and flag names come from the one list in netlinkutil/kernel.
var (
	macvlanModes = kernel.MacvlanModes
	ipvlanModes  = kernel.IpvlanModes
	ipvlanFlags  = kernel.IpvlanFlags
)

func oneOf(value string, valid []string) bool { return slices.Contains(valid, value) }

// netOptions is the validated driver configuration of a network.
type netOptions struct {
	Parent, Type, Mode, Flag string
	MTU                      int
	// Config holds the options a record keeps typed (record.NetworkConfig).
	Config record.NetworkConfig
	// Given holds the options as the user gave them.
	Given map[string]string
}

// ParseOptions validates driver options without looking at the kernel,
// row by row of the option table (DriverOptions). An option with an empty
// value means its default, as if it were absent.
func ParseOptions(given map[string]string) (netOptions, error) {
	p := parsing{opts: make(map[string]string, len(given)), o: &netOptions{Given: map[string]string{}, Config: DefaultConfig()}}
	byName := make(map[string]DriverOption, len(DriverOptions))
	for _, opt := range DriverOptions {
		byName[opt.Name] = opt
	}
	for k, v := range given {
		if v == "" && byName[k].NeedsValue != "" {
			// Where an empty value would switch a feature off unseen, it
			// is refused, not taken for the default.
			return netOptions{}, Invalidf("driver option %s is given without a value: write -o %s=%s", k, k, byName[k].NeedsValue)
		}
		if v != "" {
			p.opts[k] = v
		}
	}
	var unknown []string
	for k := range given {
		if _, ok := byName[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return netOptions{}, Invalidf("unknown driver option %q: underlay accepts %s", unknown[0], strings.Join(DriverOptionNames(), ", "))
	}
	for k, v := range p.opts {
		p.o.Given[k] = v
	}
	for _, opt := range DriverOptions {
		if err := opt.parse(&p, p.opts[opt.Name]); err != nil {
			return netOptions{}, err
		}
	}
	o := *p.o
	if pr, dhcp := o.Config.Probe, o.Config.DHCP; pr.Given && dhcp.On && pr.Budget >= dhcp.Timeout {
		return netOptions{}, Invalidf("address_probe=%s does not fit in dhcp_timeout %s: each offer is probed within the time a container's start waits for its lease; give a shorter probe or a longer dhcp_timeout", pr.Budget, dhcp.Timeout)
	}
	return o, nil
}

// longVLAN reports whether a name too long for a link is IFACE.VID with a
// valid IFACE: the resolver explains that the VLAN needs a shorter name.
func longVLAN(name string) bool {
	base, _, ok := kernel.SplitVLAN(name)
	return ok && len(base) <= kernel.MaxNameLen
}

func ValueOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// GenericOptions extracts com.docker.network.generic as strings.
func GenericOptions(opts map[string]any) (map[string]string, error) {
	raw, ok := opts[LabelGeneric]
	if !ok || raw == nil {
		return map[string]string{}, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, Invalidf("%s must be an object of string options, got %T", LabelGeneric, raw)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, Invalidf("driver option %q must be a string, got %v (%T)", k, v, v)
		}
		out[k] = s
	}
	return out, nil
}

// BoolOption reads a top-level boolean label; Docker sends JSON booleans,
// older tools strings.
func BoolOption(opts map[string]any, key string) (bool, error) {
	switch v := opts[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, Invalidf("option %s=%q is not a boolean", key, v)
		}
		return b, nil
	default:
		return false, Invalidf("option %s must be a boolean, got %v (%T)", key, v, v)
	}
}

// parsePools validates IPAM data of one family.
func parsePools(family string, data []*network.IPAMData, want6 bool) ([]record.Pool, error) {
	var out []record.Pool
	for i, d := range data {
		if d == nil || d.Pool == "" {
			return nil, Invalidf("%s[%d] has no Pool: Docker's IPAM sends the subnet of every pool; check the --subnet of the network", family, i)
		}
		prefix, err := netip.ParsePrefix(d.Pool)
		if err != nil {
			return nil, Invalidf("%s pool %q is not a subnet in CIDR form: %v", family, d.Pool, err)
		}
		if prefix.Addr().Is6() != want6 || prefix.Addr().Is4In6() {
			return nil, Invalidf("%s pool %q is not an %s subnet", family, d.Pool, map[bool]string{false: "IPv4", true: "IPv6"}[want6])
		}
		p := record.Pool{Subnet: prefix.Masked().String()}
		if d.Gateway != "" {
			gw, err := netaddr.Parse(d.Gateway)
			if err != nil {
				return nil, Invalidf("%s gateway %q of pool %s is not an address: %v", family, d.Gateway, d.Pool, err)
			}
			if !prefix.Contains(gw) {
				return nil, Invalidf("%s gateway %s is outside its pool %s: pick a gateway inside the subnet", family, gw, prefix)
			}
			p.Gateway = gw.String()
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseNetwork turns a CreateNetwork request into the network's record,
// validating everything that does not need the kernel.
func ParseNetwork(req *network.CreateNetworkRequest) (record.Network, error) {
	if req.NetworkID == "" {
		return record.Network{}, Invalidf("CreateNetwork without NetworkID")
	}
	generic, err := GenericOptions(req.Options)
	if err != nil {
		return record.Network{}, err
	}
	o, err := ParseOptions(generic)
	if err != nil {
		return record.Network{}, err
	}
	internal, err := BoolOption(req.Options, LabelInternal)
	if err != nil {
		return record.Network{}, err
	}
	if _, err := BoolOption(req.Options, labelEnableIPv6); err != nil {
		return record.Network{}, err
	}
	v4, err := parsePools("IPv4Data", req.IPv4Data, false)
	if err != nil {
		return record.Network{}, err
	}
	v6, err := parsePools("IPv6Data", req.IPv6Data, true)
	if err != nil {
		return record.Network{}, err
	}
	if err := CheckDHCPNetwork(o.Config.DHCP, req, o, internal); err != nil {
		return record.Network{}, err
	}
	if err := CheckIPv6Mode(o.Config.IPv6Mode, req, o, internal); err != nil {
		return record.Network{}, err
	}
	lan6 := o.Config.IPv6Mode != IPv6Static
	if o.Config.DHCP.On || (lan6 && nullPool(req.IPv4Data)) {
		v4 = nil // the null IPAM's 0.0.0.0/0: addresses come per lease, or there are none
	}
	if lan6 && NullPool6(req.IPv6Data) {
		v6 = nil // the null IPAM's ::/0: addresses come from the LAN
	}
	if len(v4)+len(v6) == 0 && !o.Config.DHCP.On && !lan6 {
		return record.Network{}, Invalidf("network %s has no IPAM data (IPv4Data and IPv6Data are empty): create it with --subnet, or with Docker's default IPAM driver", dockerid.Short(req.NetworkID))
	}
	if err := overlapsWithin(AllPools(record.Network{IPv4: v4, IPv6: v6})); err != nil {
		return record.Network{}, err
	}
	hostAddr, err := parseHostAddress(o, v4, req.IPv4Data)
	if err != nil {
		return record.Network{}, err
	}
	_, engineAnnounces := req.Options[LabelEnableIPv4]
	n := record.Network{
		ID: req.NetworkID, Type: o.Type, Parent: o.Parent, Mode: o.Mode, Flag: o.Flag, MTU: o.MTU,
		Internal: internal || o.Parent == "", IPv4: v4, IPv6: v6, Options: o.Given, HostAddress: hostAddr,
		EngineAnnounces: engineAnnounces, Config: o.Config,
	}
	if o.Parent == "" {
		n.Parent = DummyName(req.NetworkID)
	}
	return n, nil
}

func overlapsWithin(pools []record.Pool) error {
	for i := range pools {
		for j := i + 1; j < len(pools); j++ {
			if PoolsOverlap(pools[i], pools[j]) {
				return Invalidf("pools %s and %s of one network overlap", pools[i].Subnet, pools[j].Subnet)
			}
		}
	}
	return nil
}

func PoolsOverlap(a, b record.Pool) bool {
	pa, errA := netip.ParsePrefix(a.Subnet)
	pb, errB := netip.ParsePrefix(b.Subnet)
	return errA == nil && errB == nil && pa.Overlaps(pb)
}

// AllPools returns a network's IPv4 and IPv6 pools in one slice.
func AllPools(n record.Network) []record.Pool {
	return append(append([]record.Pool{}, n.IPv4...), n.IPv6...)
}
