package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/vocab"
	"github.com/underlay-net/underlay/store/record"
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
		if o.Type != vocab.KindMacvlan && o.Type != vocab.KindIpvlan {
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

// FuzzParseParent: any parent option is parsed without panicking, and
// whatever parses resolves over a node's links and routes to a link or a
// refusal of the request (ErrInvalid).
func FuzzParseParent(f *testing.F) {
	for _, seed := range []string{"eth0", "eth0.10", "ens3,ens4", "auto", "auto.10", "auto.x", ",", "a,,b", "auto,eth0", "lo.1", "ens3.20,eth0.010"} {
		f.Add(seed, "198.18.40.0/24")
	}
	routes := []vocab.Route{rt("198.18.40.0/24", 2, 0, ""), rt("0.0.0.0/0", 3, 0, "198.18.60.1")}
	f.Fuzz(func(t *testing.T, parent, subnet string) {
		if _, err := ParseParent(parent); err != nil {
			if !errors.Is(err, pluginapi.ErrInvalid) {
				t.Fatalf("parseParent(%q) = %v, not ErrInvalid", parent, err)
			}
			return
		}
		n := asking(parent)
		n.IPv4 = []record.Pool{{Subnet: subnet}}
		if _, err := ResolveParent(n, nodeLinks(), routes); err != nil && !errors.Is(err, pluginapi.ErrInvalid) {
			t.Fatalf("resolveParent(%q, %q) = %v, not ErrInvalid", parent, subnet, err)
		}
	})
}
