package plan

import (
	"errors"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// FuzzParseParent: any parent option is parsed without panicking, and
// whatever parses resolves over a node's links and routes to a link or a
// refusal of the request (ErrInvalid).
func FuzzParseParent(f *testing.F) {
	for _, seed := range []string{"eth0", "eth0.10", "ens3,ens4", "auto", "auto.10", "auto.x", ",", "a,,b", "auto,eth0", "lo.1", "ens3.20,eth0.010"} {
		f.Add(seed, "198.18.40.0/24")
	}
	routes := []kernel.Route{rt("198.18.40.0/24", 2, 0, ""), rt("0.0.0.0/0", 3, 0, "198.18.60.1")}
	f.Fuzz(func(t *testing.T, parent, subnet string) {
		if _, err := config.ParseParent(parent); err != nil {
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
