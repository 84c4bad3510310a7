package config

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/mdtable"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

var update = flag.Bool("update", false, "write the option table of docs/networks.md from the option table")

// The driver options table of docs/networks.md is the option table's: a name,
// values, default or doc that differs fails here (go test -update
// writes it).
func TestDocsDriverOptions(t *testing.T) {
	if err := mdtable.Check("../../../docs/networks.md", "### Driver options", DriverOptionsMarkdown(), *update); err != nil {
		t.Fatal(err)
	}
}

func TestDriverOptionTable(t *testing.T) {
	seen := map[string]bool{}
	for _, opt := range DriverOptions {
		if opt.Name == "" || opt.Values == "" || opt.Default == "" || opt.Doc == "" || opt.parse == nil {
			t.Errorf("row %q lacks a field: %+v", opt.Name, opt)
		}
		if seen[opt.Name] {
			t.Errorf("option %s is in the table twice", opt.Name)
		}
		seen[opt.Name] = true
		if strings.Contains(opt.Doc, "\n") || strings.Contains(opt.Doc, "|") {
			t.Errorf("the doc of %s is not one table cell: %q", opt.Name, opt.Doc)
		}
		// Every listed value is accepted (ipvlan's values with type=ipvlan),
		// and one that is not listed is refused naming the valid ones.
		for _, v := range opt.Valid {
			given := map[string]string{opt.Name: v}
			if opt.Name == OptIpvlanMode || opt.Name == OptIpvlanFlag {
				given[OptType] = kernel.KindIpvlan
			}
			if _, err := ParseOptions(given); err != nil {
				t.Errorf("%s=%s, a listed value, is refused: %v", opt.Name, v, err)
			}
		}
		if opt.Valid != nil {
			_, err := ParseOptions(map[string]string{opt.Name: "nonesuch"})
			drivertest.WantErr(t, err, pluginapi.ErrInvalid, "nonesuch", opt.Valid[len(opt.Valid)-1])
		}
	}
	_, err := ParseOptions(map[string]string{"parnet": "eth0"})
	drivertest.WantErr(t, err, pluginapi.ErrInvalid, append([]string{`"parnet"`}, DriverOptionNames()...)...)
}

// The typed configuration: the defaults, what each option sets, and the
// migration's parse of stored options giving what CreateNetwork's did.
func TestNetworkConfig(t *testing.T) {
	if drivertest.Config() != DefaultConfig() {
		t.Fatalf("drivertest.Config() %+v differs from DefaultConfig() %+v", drivertest.Config(), DefaultConfig())
	}
	for _, tc := range []struct {
		name string
		opts map[string]string
		want func(*record.NetworkConfig)
	}{
		{"none", map[string]string{"parent": "eth0"}, func(*record.NetworkConfig) {}},
		{"empty values are the defaults", map[string]string{"ipv6_mode": "", "address_probe": "", "mac_address_policy": ""}, func(*record.NetworkConfig) {}},
		{"dhcp", map[string]string{"parent": "eth0", "dhcp": "true", "dhcp_timeout": "4s"}, func(c *record.NetworkConfig) {
			c.DHCP = record.DHCPConfig{On: true, Timeout: 4 * time.Second}
		}},
		{"dhcpv6 with a timeout", map[string]string{"parent": "eth0", "ipv6_mode": "dhcpv6", "dhcp_timeout": "12s"}, func(c *record.NetworkConfig) {
			c.IPv6Mode, c.DHCP.Timeout = IPv6DHCPv6, 12*time.Second
		}},
		{"slaac", map[string]string{"ipv6_mode": "slaac"}, func(c *record.NetworkConfig) { c.IPv6Mode = IPv6SLAAC }},
		{"random MACs", map[string]string{"mac_address_policy": "random"}, func(c *record.NetworkConfig) { c.MACPolicy = MacRandom }},
		{"probe given", map[string]string{"address_probe": "0"}, func(c *record.NetworkConfig) { c.Probe = record.AddressProbe{Given: true} }},
		{"probe 1s", map[string]string{"address_probe": "1s"}, func(c *record.NetworkConfig) { c.Probe = record.AddressProbe{Budget: time.Second, Given: true} }},
		{"announcements", map[string]string{OptAdvertiseNMsgs: "0", OptAdvertiseMs: "250"}, func(c *record.NetworkConfig) {
			c.Announce = record.Announce{Count: 0, Interval: 250 * time.Millisecond}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := DefaultConfig()
			tc.want(&want)
			o, err := ParseOptions(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if o.Config != want {
				t.Errorf("ParseOptions: %+v, want %+v", o.Config, want)
			}
			got, err := ConfigFromOptions(tc.opts, o.Type)
			if err != nil || got != want {
				t.Errorf("ConfigFromOptions: %+v, %v; want %+v", got, err, want)
			}
		})
	}
	// Stored options that no longer parse keep their defaults (a MAC
	// policy its value: any but stable draws random MACs).
	got, err := ConfigFromOptions(map[string]string{"dhcp": "maybe", "address_probe": "1m", "ipv6_mode": "dhcp6", "mac_address_policy": "bogus"}, kernel.KindMacvlan)
	want := DefaultConfig()
	want.MACPolicy = "bogus"
	if err == nil || got != want {
		t.Errorf("options that do not parse: %+v, %v; want %+v and an error", got, err, want)
	}
}
