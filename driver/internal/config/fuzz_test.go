package config

import (
	"strings"
	"testing"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

func FuzzParseOptions(f *testing.F) {
	f.Add("parent", "eth0.10", "type", "ipvlan", "mtu", "1400")
	f.Add("macvlan_mode", "passthru", "ipvlan_flag", "vepa", "", "")
	f.Add("ipvlan_mode", "l3s", "parent", "", "mtu", "-1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		opts := map[string]string{k1: v1, k2: v2, k3: v3}
		o, err := ParseOptions(opts)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid request") {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		if o.Type != kernel.KindMacvlan && o.Type != kernel.KindIpvlan {
			t.Fatalf("accepted type %q", o.Type)
		}
		if o.MTU != 0 && (o.MTU < minMTU || o.MTU > maxMTU) {
			t.Fatalf("accepted mtu %d", o.MTU)
		}
		// Every name in the parent option (one, or each candidate of a
		// list) fits the kernel's 15 bytes, unless it is IFACE.VID with a
		// base that does (the resolver explains the VLAN's name), and none
		// is lo.
		spec, err := ParseParent(o.Parent)
		if err != nil {
			t.Fatalf("parseOptions accepted parent %q that parseParent refuses: %v", o.Parent, err)
		}
		for _, c := range spec.Candidates {
			if (len(c) > 15 && !longVLAN(c)) || c == "lo" {
				t.Fatalf("accepted parent %q (candidate %q)", o.Parent, c)
			}
		}
	})
}
