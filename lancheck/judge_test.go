package lancheck

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
)

var (
	gw      = netip.MustParseAddr("198.18.5.1")
	gwMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	srvMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	rogMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	upLink  = LinkState{Exists: true, Kind: "device", MTU: 1500}
	offer1  = dhcp.Offer{Server: netip.MustParseAddr("198.18.5.2"), ServerMAC: srvMAC, Addr: netip.MustParsePrefix("198.18.5.100/24"), Router: gw, LeaseTime: time.Hour}
	offer2  = dhcp.Offer{Server: netip.MustParseAddr("198.18.5.66"), ServerMAC: rogMAC, Addr: netip.MustParsePrefix("198.18.5.200/24"), LeaseTime: time.Minute}
	slaacRA = Router{Source: netip.MustParseAddr("fe80::1"), MAC: gwMAC, Lifetime: 30 * time.Minute,
		Prefixes: []RAPrefix{{Prefix: netip.MustParsePrefix("2001:db8:5::/64"), OnLink: true, Autonomous: true}}}
)

// item returns the one item of check (and family) in items.
func item(t *testing.T, items []Item, c Check, family string) Item {
	t.Helper()
	var found []Item
	for _, it := range items {
		if it.Check == c && it.Family == family {
			found = append(found, it)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d items of %s %s in %+v", len(found), c, family, items)
	}
	return found[0]
}

func TestJudge(t *testing.T) {
	macvlan := Network{Parent: "eth0", Type: "macvlan", Mode: "bridge"}
	reached := func(o *Observations) {
		o.Parent4 = Reach{Target: gw, From: "the parent eth0", Answered: true, AnswerMAC: gwMAC}
		o.Child4 = Reach{Target: gw, From: "02:aa:bb:cc:dd:ee", Answered: true, AnswerMAC: gwMAC}
		o.Parent4From = "the network's gateway"
	}
	for _, tc := range []struct {
		name    string
		n       Network
		o       func(*Observations)
		check   Check
		family  string
		verdict Verdict
		// evidence and fix must contain these.
		evidence, fix []string
	}{
		{name: "parent ok", n: macvlan, check: Parent, verdict: OK, evidence: []string{"eth0 is up with carrier"}},
		{name: "parent down", n: macvlan, o: func(o *Observations) { o.Link.Down = true }, check: Parent, verdict: Problem, evidence: []string{"down"}, fix: []string{"ip link set eth0 up"}},
		{name: "parent without carrier", n: macvlan, o: func(o *Observations) { o.Link.NoCarrier = true }, check: Parent, verdict: Problem, evidence: []string{"without carrier"}, fix: []string{"cable"}},
		{name: "parent missing", n: macvlan, o: func(o *Observations) { o.Link = LinkState{Err: "link not found"} }, check: Parent, verdict: Problem, evidence: []string{"eth0 does not exist"}},
		{name: "VLAN's base down", n: Network{Parent: "eth0.10", Type: "macvlan"}, o: func(o *Observations) {
			o.Link.Kind, o.Link.BaseName, o.Link.VLAN = "vlan", "eth0", 10
			o.Link.Base = &LinkState{Exists: true, Kind: "device", Down: true, MTU: 1500}
		}, check: Parent, verdict: Problem, evidence: []string{"its base eth0 is down"}, fix: []string{"eth0"}},
		{name: "VLAN not made yet, base up", n: Network{Parent: "eth0.10", Type: "macvlan"}, o: func(o *Observations) {
			o.Link = LinkState{Err: "not found", BaseName: "eth0", VLAN: 10, Base: &LinkState{Exists: true, Kind: "device", MTU: 1500}}
		}, check: Parent, verdict: OK, evidence: []string{"underlay makes VLAN 10 on eth0"}},
		{name: "wireless macvlan", n: macvlan, o: func(o *Observations) { o.Link.Wireless = true }, check: Wireless, verdict: Problem, evidence: []string{"wireless"}, fix: []string{"ipvlan_mode=l2"}},
		{name: "wireless ipvlan", n: Network{Parent: "eth0", Type: "ipvlan", Mode: "l2"}, o: func(o *Observations) { o.Link.Wireless = true }, check: Wireless, verdict: OK},
		{name: "wireless allowed", n: Network{Parent: "eth0", Type: "macvlan", AllowWireless: true}, o: func(o *Observations) { o.Link.Wireless = true }, check: Wireless, verdict: OK, evidence: []string{"allow_wireless=true"}},
		{name: "wired", n: macvlan, check: Wireless, verdict: OK, evidence: []string{"not a wireless"}},
		{name: "mtu too large", n: Network{Parent: "eth0", Type: "macvlan", MTU: 9000}, check: MTU, verdict: Problem, evidence: []string{"9000", "1500"}, fix: []string{"-o mtu=1500"}},
		{name: "mtu fits", n: Network{Parent: "eth0", Type: "macvlan", MTU: 1400}, check: MTU, verdict: OK},
		{name: "mtu above the router's", n: macvlan, o: func(o *Observations) { r := slaacRA; r.MTU = 1280; o.Routers = []Router{r} }, check: MTU, verdict: Problem, evidence: []string{"advertises MTU 1280"}},
		{name: "new MAC through", n: macvlan, o: reached, check: NewMAC, verdict: OK, evidence: []string{"throwaway macvlan child"}},
		{name: "new MAC dropped", n: macvlan, o: func(o *Observations) { reached(o); o.Child4.Answered = false }, check: NewMAC, verdict: Problem,
			evidence: []string{"port security", "VMware", "Hyper-V"}, fix: []string{"ipvlan_mode=l2", "switch port"}},
		{name: "new MAC, nobody answers", n: macvlan, o: func(o *Observations) { reached(o); o.Child4.Answered, o.Parent4.Answered = false, false }, check: NewMAC, verdict: Unknown},
		{name: "new MAC, no target", n: macvlan, check: NewMAC, verdict: Unknown, evidence: []string{"no host to ask"}},
		{name: "new MAC dropped, seen by DHCP", n: macvlan, o: func(o *Observations) { o.ParentOffers = []dhcp.Offer{offer1} }, check: NewMAC, verdict: Problem,
			evidence: []string{"198.18.5.2", "own MAC", "port security"}, fix: []string{"ipvlan_mode=l2"}},
		{name: "new MAC through, seen by DHCP", n: macvlan, o: func(o *Observations) { o.Offers, o.ParentOffers = []dhcp.Offer{offer1}, []dhcp.Offer{offer1} }, check: NewMAC, verdict: OK},
		{name: "DHCP answers the parent's MAC only", n: Network{Parent: "eth0", Type: "macvlan", DHCP: true}, o: func(o *Observations) { o.ParentOffers = []dhcp.Offer{offer1} }, check: DHCP, verdict: Problem,
			evidence: []string{"own MAC only"}, fix: []string{"new-mac"}},
		{name: "one DHCP server seen twice", n: Network{Parent: "eth0", Type: "macvlan", DHCP: true}, o: func(o *Observations) { o.Offers, o.ParentOffers = []dhcp.Offer{offer1}, []dhcp.Offer{offer1} }, check: DHCP, verdict: OK},
		{name: "not Ethernet", n: macvlan, o: func(o *Observations) { o.Link.NotEthernet, o.Link.Encap = true, "none" }, check: Parent, verdict: Problem, evidence: []string{"not an Ethernet link"}},
		{name: "VLAN on a wireless base", n: Network{Parent: "wlan0.10", Type: "macvlan"}, o: func(o *Observations) {
			o.Link.Kind, o.Link.BaseName, o.Link.VLAN = "vlan", "wlan0", 10
			o.Link.Base = &LinkState{Exists: true, Kind: "device", Wireless: true, MTU: 1500}
		}, check: Wireless, verdict: Problem},
		{name: "DHCPv6 without addresses", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "dhcpv6"}, o: func(o *Observations) {
			o.Advertises = []dhcp6.Advertisement{{ServerID: []byte{0, 3}, ServerMAC: srvMAC, Source: netip.MustParseAddr("fe80::2"), Status: "NoAddrsAvail: no addresses"}}
		}, check: DHCPv6, verdict: Problem, evidence: []string{"NoAddrsAvail"}},
		{name: "new MAC, no child", n: macvlan, o: func(o *Observations) { reached(o); o.Child4, o.ChildErr = Reach{}, "EPERM" }, check: NewMAC, verdict: Unknown, evidence: []string{"EPERM"}},
		{name: "new MAC on ipvlan", n: Network{Parent: "eth0", Type: "ipvlan"}, check: NewMAC, verdict: OK, evidence: []string{"parent's MAC"}},
		{name: "gateway answers", n: macvlan, o: reached, check: Gateway, family: "ipv4", verdict: OK, evidence: []string{"198.18.5.1", "02:00:00:00:00:01"}},
		{name: "gateway silent", n: macvlan, o: func(o *Observations) { reached(o); o.Parent4.Answered = false }, check: Gateway, family: "ipv4", verdict: Problem, evidence: []string{"did not answer"}},
		{name: "gateway unknown", n: macvlan, check: Gateway, family: "ipv4", verdict: Unknown},
		{name: "gateway6 silent", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "static", Gateway6: netip.MustParseAddr("2001:db8:5::1")}, o: func(o *Observations) {
			o.Parent6 = Reach{Target: netip.MustParseAddr("2001:db8:5::1"), From: "the parent eth0"}
		}, check: Gateway, family: "ipv6", verdict: Problem},
		{name: "gateway6 from an RA", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "slaac"}, o: func(o *Observations) { o.Routers = []Router{slaacRA} }, check: Gateway, family: "ipv6", verdict: OK, evidence: []string{"fe80::1"}},
		{name: "one DHCP server", n: Network{Parent: "eth0", Type: "macvlan", DHCP: true}, o: func(o *Observations) { o.Offers = []dhcp.Offer{offer1} }, check: DHCP, verdict: OK,
			evidence: []string{"198.18.5.2", "02:00:00:00:00:02", "198.18.5.100/24", "router 198.18.5.1", "1h0m0s"}},
		{name: "two DHCP servers", n: macvlan, o: func(o *Observations) { o.Offers = []dhcp.Offer{offer1, offer2} }, check: DHCP, verdict: Problem,
			evidence: []string{"rogue", "198.18.5.2", "02:00:00:00:00:02", "198.18.5.66", "02:00:00:00:00:03"}, fix: []string{"MAC"}},
		{name: "no DHCP server, DHCP network", n: Network{Parent: "eth0", Type: "macvlan", DHCP: true}, check: DHCP, verdict: Problem, fix: []string{"--subnet"}},
		{name: "no DHCP server, static network", n: macvlan, check: DHCP, verdict: Unknown},
		{name: "RA for slaac", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "slaac"}, o: func(o *Observations) { o.Routers = []Router{slaacRA} }, check: IPv6RA, verdict: OK, evidence: []string{"2001:db8:5::/64 [LA]", "M=false"}},
		{name: "no RA for slaac", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "slaac"}, check: IPv6RA, verdict: Problem, fix: []string{"router advertisements"}},
		{name: "no RA, no IPv6", n: macvlan, check: IPv6RA, verdict: Unknown},
		{name: "RA without M for dhcpv6", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "dhcpv6"}, o: func(o *Observations) { o.Routers = []Router{slaacRA} }, check: IPv6RA, verdict: Problem, evidence: []string{"managed (M) flag"}},
		{name: "RA without A for slaac", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "slaac"}, o: func(o *Observations) {
			r := slaacRA
			r.Managed, r.Prefixes = true, []RAPrefix{{Prefix: netip.MustParsePrefix("2001:db8:5::/64"), OnLink: true}}
			o.Routers = []Router{r}
		}, check: IPv6RA, verdict: Problem, evidence: []string{"autonomous"}},
		{name: "no DHCPv6 for dhcpv6", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "dhcpv6"}, check: DHCPv6, verdict: Problem},
		{name: "DHCPv6 answers", n: Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "dhcpv6"}, o: func(o *Observations) {
			o.Advertises = []dhcp6.Advertisement{{ServerID: []byte{0, 3, 0, 1, 2, 0, 0, 0, 0, 2}, ServerMAC: srvMAC, Source: netip.MustParseAddr("fe80::2"), Addrs: []netip.Addr{netip.MustParseAddr("2001:db8:5::100")}}}
		}, check: DHCPv6, verdict: OK, evidence: []string{"2001:db8:5::100", "00:03:00:01"}},
		{name: "skipped", n: macvlan, o: func(o *Observations) { o.Skipped[DHCP] = Skip{Why: "eth0 is down", Fix: "fix the parent first"} }, check: DHCP, verdict: Unknown, evidence: []string{"eth0 is down"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Observations{Link: upLink, Skipped: map[Check]Skip{}}
			if tc.o != nil {
				tc.o(&o)
			}
			items := Judge(tc.n, o)
			it := item(t, items, tc.check, tc.family)
			if it.Verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s: %+v", it.Verdict, tc.verdict, it)
			}
			for _, s := range tc.evidence {
				if !strings.Contains(it.Evidence, s) {
					t.Errorf("evidence %q lacks %q", it.Evidence, s)
				}
			}
			for _, s := range tc.fix {
				if !strings.Contains(it.Fix, s) {
					t.Errorf("fix %q lacks %q", it.Fix, s)
				}
			}
			if it.Verdict != OK && it.Fix == "" && it.Check != DHCP && it.Check != IPv6RA && it.Check != DHCPv6 {
				t.Errorf("a %s verdict without a fix: %+v", it.Verdict, it)
			}
			if it.Verdict == Problem && it.Fix == "" {
				t.Errorf("a problem without a fix: %+v", it)
			}
		})
	}
}

// Every check is reported, in Checks' order of names.
func TestJudgeReportsEveryCheck(t *testing.T) {
	items := Judge(Network{Parent: "eth0", Type: "macvlan", IPv6Mode: "slaac"}, Observations{Link: upLink, Skipped: map[Check]Skip{}})
	seen := map[Check]int{}
	for _, it := range items {
		seen[it.Check]++
		if it.Evidence == "" {
			t.Errorf("no evidence: %+v", it)
		}
	}
	for _, c := range Checks {
		if seen[c] == 0 {
			t.Errorf("check %s not reported", c)
		}
	}
	if seen[Gateway] != 2 {
		t.Errorf("gateway items %d, want one per family", seen[Gateway])
	}
}
