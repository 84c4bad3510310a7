package plan

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure: the planners and the configuration they build on link no kernel, no state file and no DHCP client;
// they may use the plain types of store/record and netlinkutil/kernel.
func TestPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/underlay-net/underlay/netlinkutil",
		"github.com/underlay-net/underlay/store",
		"github.com/underlay-net/underlay/dhcp",
		"github.com/underlay-net/underlay/probe",
		"github.com/vishvananda/netlink",
		"github.com/google/nftables",
		"go.etcd.io/bbolt",
		"github.com/mdlayher/packet",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") && !allowed(pkg) {
				t.Errorf("plan depends on %s", pkg)
			}
		}
	}
}

func allowed(pkg string) bool {
	return pkg == "github.com/underlay-net/underlay/store/record" || pkg == "github.com/underlay-net/underlay/netlinkutil/kernel"
}
