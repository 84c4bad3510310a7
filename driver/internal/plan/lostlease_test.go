package plan

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

func TestPlanBlocks(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	lost := []BlockKey{{"lan0", a("198.18.180.100")}, {"lan0", a("198.18.180.101")}}
	present := []BlockKey{{"lan0", a("198.18.180.101")}, {"lan1", a("198.18.9.9")}}
	add, remove := PlanBlocks(lost, present)
	if fmt.Sprint(add) != fmt.Sprint([]BlockKey{{"lan0", a("198.18.180.100")}}) || fmt.Sprint(remove) != fmt.Sprint([]BlockKey{{"lan1", a("198.18.9.9")}}) {
		t.Fatalf("add %v remove %v", add, remove)
	}
}

func TestLostBlocks(t *testing.T) {
	lost := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	v4 := func(lostAt time.Time) *record.Lease { return &record.Lease{Addr: "198.18.180.100/24", Lost: lostAt} }
	v6 := func(lostAt time.Time) *record.Lease6 { return &record.Lease6{Addr: "2001:db8:60::100", Lost: lostAt} }
	net := func(opts ...string) record.Network {
		o := map[string]string{"parent": "lan0"}
		for i := 0; i+1 < len(opts); i += 2 {
			o[opts[i]] = opts[i+1]
		}
		c, _ := config.ConfigFromOptions(o, kernel.KindMacvlan)
		return record.Network{ID: "n", Parent: "lan0", Options: o, Config: c}
	}
	for _, c := range []struct {
		name string
		n    record.Network
		ep   record.Endpoint
		want string
	}{
		{"no leases", net("dhcp", "true"), record.Endpoint{}, "[]"},
		{"held DHCP lease", net("dhcp", "true"), record.Endpoint{Lease: v4(time.Time{})}, "[]"},
		{"lost DHCP lease", net("dhcp", "true"), record.Endpoint{Lease: v4(lost)}, "[{lan0 198.18.180.100}]"},
		{"lost DHCP lease, network without dhcp", net(), record.Endpoint{Lease: v4(lost)}, "[]"},
		{"held DHCPv6 lease", net("ipv6_mode", "dhcpv6"), record.Endpoint{Lease6: v6(time.Time{})}, "[]"},
		{"lost DHCPv6 lease", net("ipv6_mode", "dhcpv6"), record.Endpoint{Lease6: v6(lost)}, "[{lan0 2001:db8:60::100}]"},
		{"lost DHCPv6 lease, slaac network", net("ipv6_mode", "slaac"), record.Endpoint{Lease6: v6(lost)}, "[]"},
		{"both lost", net("dhcp", "true", "ipv6_mode", "dhcpv6"), record.Endpoint{Lease: v4(lost), Lease6: v6(lost)}, "[{lan0 198.18.180.100} {lan0 2001:db8:60::100}]"},
		{"unparsable addresses", net("dhcp", "true", "ipv6_mode", "dhcpv6"), record.Endpoint{Lease: &record.Lease{Addr: "x", Lost: lost}, Lease6: &record.Lease6{Addr: "y", Lost: lost}}, "[]"},
	} {
		if got := fmt.Sprint(LostBlocks(c.n, c.ep)); got != c.want {
			t.Errorf("%s: LostBlocks = %s, want %s", c.name, got, c.want)
		}
	}
}
