package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/underlay-net/underlay/internal/mdtable"
	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// DriverOption is one row of the driver option table: an option of
// docker network create -d underlay -o NAME=VALUE. The table drives the
// validation (ParseOptions), the list of valid names a refusal gives, the
// typed configuration of a network's record (record.NetworkConfig) and
// the table of driver options in docs/networks.md (TestDocsDriverOptions).
type DriverOption struct {
	// Name is the option's name.
	Name string
	// Values are the valid values, as the docs word them.
	Values string
	// Valid lists the valid values where there is a list, the default
	// first; nil otherwise.
	Valid []string
	// Default is what an absent option (or one with an empty value)
	// means, as the docs word it.
	Default string
	// Doc is the option's one-line doc, the docs' Meaning.
	Doc string
	// NeedsValue is set where an empty value would switch a feature off
	// unseen: such an option is refused without a value, and NeedsValue
	// is the value the refusal suggests.
	NeedsValue string
	// parse validates the value (v is "" when the option is absent or
	// empty) and sets it in p. Rows are parsed in table order: a row may
	// read what the rows before it set.
	parse func(p *parsing, v string) error
	// config says the row sets a field of record.NetworkConfig.
	config bool
}

// parsing is the state of one parse of a network's options.
type parsing struct {
	// opts are the options given with a value.
	opts map[string]string
	o    *netOptions
}

func (p *parsing) has(name string) bool { _, ok := p.opts[name]; return ok }

// The announcements' ranges (Docker's own).
const (
	maxAnnounceCount     = 3
	minAnnounceMs        = 100
	maxAnnounceMs        = 2000
	defaultAnnounceCount = 3
	defaultAnnounceMs    = 1000
)

// code formats values as the docs do: each in backquotes.
func code(values ...string) string {
	return "`" + strings.Join(values, "`, `") + "`"
}

// DriverOptions is the driver option table, in the docs' order.
var DriverOptions = []DriverOption{
	{
		Name:    OptParent,
		Values:  "interface name or altname, or `IFACE.VLAN`; a list `IF1,IF2,…`; `auto` or `auto.VLAN`",
		Default: "none: internal network on a dummy link",
		Doc:     "Host interface the endpoints hang off. `eth0.10` is VLAN 10 on eth0, created if missing (VLAN 1–4094). See [One link, one parent](#one-link-one-parent). A list or `auto` resolves on each host: see [Per-node parents](#per-node-parents).",
		parse: func(p *parsing, v string) error {
			p.o.Parent = v
			_, err := ParseParent(v)
			return err
		},
	},
	{
		Name: OptType, Values: code(kernel.KindMacvlan, kernel.KindIpvlan), Valid: []string{kernel.KindMacvlan, kernel.KindIpvlan},
		Default: code(kernel.KindMacvlan) + " (" + code(kernel.KindIpvlan) + " if `ipvlan_mode`/`ipvlan_flag` is given)",
		Doc:     "Link type.",
		parse:   parseType,
	},
	{
		Name: OptMacvlanMode, Values: code(macvlanModes...), Valid: macvlanModes, Default: code(macvlanModes[0]),
		Doc: "macvlan mode. Refused with `type=ipvlan`.",
		parse: func(p *parsing, v string) error {
			if p.o.Type != kernel.KindMacvlan {
				return nil
			}
			p.o.Mode = ValueOr(v, macvlanModes[0])
			if !oneOf(p.o.Mode, macvlanModes) {
				return Invalidf("macvlan_mode %q is not valid: use one of %s", p.o.Mode, strings.Join(macvlanModes, ", "))
			}
			return nil
		},
	},
	{
		Name: OptIpvlanMode, Values: code(ipvlanModes...), Valid: ipvlanModes, Default: code(ipvlanModes[0]),
		Doc: "ipvlan mode. Refused with `type=macvlan`.",
		parse: func(p *parsing, v string) error {
			if p.o.Type != kernel.KindIpvlan {
				return nil
			}
			p.o.Mode = ValueOr(v, ipvlanModes[0])
			if !oneOf(p.o.Mode, ipvlanModes) {
				return Invalidf("ipvlan_mode %q is not valid: use one of %s", p.o.Mode, strings.Join(ipvlanModes, ", "))
			}
			return nil
		},
	},
	{
		Name: OptIpvlanFlag, Values: code(ipvlanFlags...), Valid: ipvlanFlags, Default: code(ipvlanFlags[0]),
		Doc: "ipvlan flag. Refused with `type=macvlan`.",
		parse: func(p *parsing, v string) error {
			if p.o.Type != kernel.KindIpvlan {
				return nil
			}
			p.o.Flag = ValueOr(v, ipvlanFlags[0])
			if !oneOf(p.o.Flag, ipvlanFlags) {
				return Invalidf("ipvlan_flag %q is not valid: use one of %s", p.o.Flag, strings.Join(ipvlanFlags, ", "))
			}
			return nil
		},
	},
	{
		Name: OptMTU, Values: fmt.Sprintf("%d … the parent's MTU", minMTU), Default: "the parent's",
		Doc: "MTU of every endpoint link.",
		parse: func(p *parsing, v string) error {
			if v == "" {
				return nil
			}
			mtu, err := strconv.Atoi(v)
			if err != nil || mtu < minMTU || mtu > maxMTU {
				return Invalidf("mtu %q is not valid: use a whole number from %d to the parent interface's MTU", v, minMTU)
			}
			p.o.MTU = mtu
			return nil
		},
	},
	{
		// Checked by ParseNetwork against the pools (shim.go).
		Name: OptHostAddress, Values: "an IPv4 address of the subnet, reserved with `--aux-address`", Default: "none",
		Doc:   "The host's own address on the network: see [Reaching containers from the host](host-access.md#reaching-containers-from-the-host).",
		parse: func(*parsing, string) error { return nil },
	},
	{
		Name: OptDHCP, Values: code("true", "false"), Default: code("false"), NeedsValue: "true (or false)", config: true,
		Doc: "Addresses from the LAN's DHCP server (with `--ipam-driver null`): see [DHCP](dhcp.md#addresses-from-the-lans-dhcp-server).",
		parse: func(p *parsing, v string) error {
			if v == "" {
				return nil
			}
			on, err := strconv.ParseBool(v)
			if err != nil {
				return Invalidf("dhcp %q is not a boolean: use -o dhcp=true", v)
			}
			p.o.Config.DHCP.On = on
			return nil
		},
	},
	{
		Name:    OptDHCPTimeout,
		Values:  fmt.Sprintf("a duration from %s to %s", code(minDHCPTimeout.String()), code(maxDHCPTimeout.String())),
		Default: code(DefaultDHCPTimeout.String()), NeedsValue: DefaultDHCPTimeout.String(), config: true,
		Doc: "How long a container's start waits for a lease before it is refused. Only with `dhcp=true` or `ipv6_mode=dhcpv6`.",
		parse: func(p *parsing, v string) error {
			if v == "" {
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < minDHCPTimeout || d > maxDHCPTimeout {
				return Invalidf("dhcp_timeout %q is not a duration from %s to %s (a DHCP exchange takes a round trip or more; Docker gives up on a plugin's answer after 30 s by default: docker plugin enable --timeout): use for example -o dhcp_timeout=10s", v, minDHCPTimeout, maxDHCPTimeout)
			}
			if !p.o.Config.DHCP.On && p.opts[OptIPv6Mode] != IPv6DHCPv6 {
				return Invalidf("dhcp_timeout=%s applies only with -o dhcp=true or -o ipv6_mode=dhcpv6 (it bounds each lease's exchange): drop it, or add one of them", v)
			}
			p.o.Config.DHCP.Timeout = d
			return nil
		},
	},
	{
		Name:    probeopt.Name,
		Values:  fmt.Sprintf("a duration from `0` (off) to %s", code(probeopt.Max.String())),
		Default: code(probeopt.Default.String()) + " with `dhcp=true` or `ipv6_mode=dhcpv6`, or when the network's subnet is a LAN the host is on (a connected route of the parent holds it); otherwise off",
		Doc:     "Probe each endpoint's addresses on the parent before the container starts. See [DHCP](dhcp.md#addresses-from-the-lans-dhcp-server).",
		config:  true,
		parse: func(p *parsing, v string) error {
			if !p.has(probeopt.Name) {
				return nil
			}
			d, ok := probeopt.Parse(v)
			if !ok {
				return Invalidf("address_probe %q is not a duration from 0 (off) to %s: use for example -o address_probe=300ms", v, probeopt.Max)
			}
			p.o.Config.Probe = record.AddressProbe{Budget: d, Given: true}
			return nil
		},
	},
	{
		Name: OptIPv6Mode, Values: code(IPv6Modes...), Valid: IPv6Modes, Default: code(IPv6Modes[0]), config: true,
		Doc: "Where containers' IPv6 addresses come from: Docker's IPAM (`static`, as before), the LAN's router advertisements (`slaac`) or the LAN's DHCPv6 server (`dhcpv6`). See [IPv6 from the LAN](ipv6.md#ipv6-from-the-lan).",
		parse: func(p *parsing, v string) error {
			m := ValueOr(v, IPv6Static)
			if !oneOf(m, IPv6Modes) {
				return Invalidf("ipv6_mode %q is not valid: use one of %s", m, strings.Join(IPv6Modes, ", "))
			}
			p.o.Config.IPv6Mode = m
			return nil
		},
	},
	{
		Name: OptMacAddressPolicy, Values: code(macPolicies...), Valid: macPolicies, Default: code(macPolicies[0]), config: true,
		Doc: "The MAC of a macvlan endpoint Docker gives none (no `--mac-address`): `stable` derives it from the parent and the endpoint's address, `random` draws a new one each time. Refused with `type=ipvlan`. See [On the LAN](lan.md#on-the-lan).",
		parse: func(p *parsing, v string) error {
			if !p.has(OptMacAddressPolicy) {
				return nil
			}
			if !oneOf(v, macPolicies) {
				return Invalidf("mac_address_policy %q is not valid: use one of %s", v, strings.Join(macPolicies, ", "))
			}
			if p.o.Type == kernel.KindIpvlan {
				return Invalidf("mac_address_policy=%s does not apply to type=ipvlan: ipvlan endpoints share the MAC address of their parent; drop the option, or use a macvlan network", v)
			}
			p.o.Config.MACPolicy = v
			return nil
		},
	},
	{
		Name: OptAdvertiseNMsgs, Values: fmt.Sprintf("`0` to `%d`", maxAnnounceCount), Default: code(strconv.Itoa(defaultAnnounceCount)), config: true,
		Doc: "How many announcements of each address after a container joins; `0`: none. Docker's own option name and range: see [On the LAN](lan.md#on-the-lan).",
		parse: func(p *parsing, v string) error {
			if !p.has(OptAdvertiseNMsgs) {
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxAnnounceCount {
				return Invalidf("%s %q is not a number from 0 (no announcements) to 3: use for example -o %s=3", OptAdvertiseNMsgs, v, OptAdvertiseNMsgs)
			}
			p.o.Config.Announce.Count = n
			return nil
		},
	},
	{
		Name: OptAdvertiseMs, Values: fmt.Sprintf("`%d` to `%d`", minAnnounceMs, maxAnnounceMs), Default: code(strconv.Itoa(defaultAnnounceMs)), config: true,
		Doc: "Milliseconds between announcements.",
		parse: func(p *parsing, v string) error {
			if !p.has(OptAdvertiseMs) {
				return nil
			}
			ms, err := strconv.Atoi(v)
			if err != nil || ms < minAnnounceMs || ms > maxAnnounceMs {
				return Invalidf("%s %q is not a number of milliseconds from 100 to 2000: use for example -o %s=1000", OptAdvertiseMs, v, OptAdvertiseMs)
			}
			p.o.Config.Announce.Interval = time.Duration(ms) * time.Millisecond
			return nil
		},
	},
	{
		Name: OptAllowWireless, Values: code("true", "false"), Default: code("false"), NeedsValue: "true (or false)", config: true,
		Doc: "Create a macvlan network on a wireless (802.11) parent, which is refused otherwise: see [Troubleshooting](troubleshooting.md#troubleshooting-the-lan).",
		parse: func(p *parsing, v string) error {
			return boolOption(OptAllowWireless, v, &p.o.Config.AllowWireless)
		},
	},
	{
		Name: OptLANCheck, Values: code("true", "false"), Default: code("true"), NeedsValue: "true (or false)", config: true,
		Doc: "Run the LAN preflight (`underlay doctor --lan`) in the background after the create; its verdicts are logged, counted in metrics and shown by `underlay ls` and `underlay doctor`.",
		parse: func(p *parsing, v string) error {
			on := true
			if err := boolOption(OptLANCheck, v, &on); err != nil {
				return err
			}
			p.o.Config.NoLANCheck = !on
			return nil
		},
	},
}

// The LAN preflight's options.
const (
	OptAllowWireless = "allow_wireless"
	OptLANCheck      = "lan_check"
)

// boolOption parses a boolean option's value into dst; "" leaves dst.
func boolOption(name, v string, dst *bool) error {
	if v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return Invalidf("%s %q is not a boolean: use -o %s=true or -o %s=false", name, v, name, name)
	}
	*dst = b
	return nil
}

// parseType takes the link type: type=, else ipvlan when an ipvlan
// option is given, else macvlan; the other type's options are refused.
func parseType(p *parsing, v string) error {
	o := p.o
	o.Type = v
	hasMacvlanMode, hasIpvlanMode, hasIpvlanFlag := p.has(OptMacvlanMode), p.has(OptIpvlanMode), p.has(OptIpvlanFlag)
	switch o.Type {
	case "":
		o.Type = kernel.KindMacvlan
		if hasIpvlanMode || hasIpvlanFlag {
			o.Type = kernel.KindIpvlan
		}
	case kernel.KindMacvlan, kernel.KindIpvlan:
	default:
		return Invalidf("type %q is not a link type underlay creates: use type=macvlan or type=ipvlan", o.Type)
	}
	if o.Type == kernel.KindIpvlan && hasMacvlanMode {
		return Invalidf("macvlan_mode=%s does not apply to type=ipvlan: drop it, or use ipvlan_mode (%s)", p.opts[OptMacvlanMode], strings.Join(ipvlanModes, ", "))
	}
	if o.Type == kernel.KindMacvlan && (hasIpvlanMode || hasIpvlanFlag) {
		key := OptIpvlanMode
		if !hasIpvlanMode {
			key = OptIpvlanFlag
		}
		return Invalidf("%s=%s does not apply to type=macvlan: drop it, or use macvlan_mode (%s)", key, p.opts[key], strings.Join(macvlanModes, ", "))
	}
	return nil
}

// DefaultConfig is the configuration of a network given none of the
// options record.NetworkConfig holds.
func DefaultConfig() record.NetworkConfig {
	return record.NetworkConfig{
		DHCP:      record.DHCPConfig{Timeout: DefaultDHCPTimeout},
		IPv6Mode:  IPv6Static,
		MACPolicy: MacStable,
		Announce:  record.Announce{Count: defaultAnnounceCount, Interval: defaultAnnounceMs * time.Millisecond},
	}
}

// DriverOptionNames lists the valid option names, in table order.
func DriverOptionNames() []string {
	out := make([]string, len(DriverOptions))
	for i, opt := range DriverOptions {
		out[i] = opt.Name
	}
	return out
}

// ConfigFromOptions is the typed configuration of options given to a
// network of link type typ, for a record written before the record kept
// it (the migration at Restore). They were validated when the network was
// created; an option that no longer parses keeps its default (a MAC
// policy its value), as the readers of the options did before, and the
// first such error is returned with the configuration.
func ConfigFromOptions(given map[string]string, typ string) (record.NetworkConfig, error) {
	p := parsing{opts: map[string]string{}, o: &netOptions{Type: typ, Config: DefaultConfig()}}
	for k, v := range given {
		if v != "" {
			p.opts[k] = v
		}
	}
	var first error
	for _, opt := range DriverOptions {
		if !opt.config {
			continue
		}
		keep := p.o.Config
		if err := opt.parse(&p, p.opts[opt.Name]); err != nil {
			p.o.Config = keep
			if opt.Name == OptMacAddressPolicy {
				// Kept as given: any policy but stable draws random MACs,
				// as the policy's reader did with one that did not parse.
				p.o.Config.MACPolicy = p.opts[opt.Name]
			}
			if first == nil {
				first = err
			}
		}
	}
	return p.o.Config, first
}

// DriverOptionsMarkdown is the table of driver options of docs/networks.md.
func DriverOptionsMarkdown() string {
	rows := make([]mdtable.Option, len(DriverOptions))
	for i, opt := range DriverOptions {
		rows[i] = mdtable.Option{Name: opt.Name, Values: opt.Values, Default: opt.Default, Doc: opt.Doc}
	}
	return mdtable.Options(rows)
}
