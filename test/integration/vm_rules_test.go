//go:build vm

package integration

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// vmOwnedParent is a parent kind underlay creates: a VLAN on d0, or the dummy
// of an internal network.
type vmOwnedParent struct {
	name string
	// opts of a network on parent p (p ignored for dummy parents).
	opts func(p string) map[string]string
	// link is the name of the parent link of network id with option p.
	link func(id, p string) string
}

var vmOwnedParents = []vmOwnedParent{
	{"vlan", func(p string) map[string]string { return map[string]string{"parent": p} }, func(_, p string) string { return p }},
	{"dummy", func(string) map[string]string { return nil }, func(id, _ string) string { return vmDummy(id) }},
}

// want fails unless the parent link of kind k named name is there,
// and returns its index.
func (k vmOwnedParent) want(t *testing.T, ns *itest.Netns, name string) int {
	t.Helper()
	if k.name == "vlan" {
		_, vid, _ := strings.Cut(name, ".")
		id, err := strconv.Atoi(vid)
		if err != nil {
			t.Fatal(err)
		}
		return vmWantVLAN(t, ns, name, "d0", id)
	}
	return vmWantDummy(t, ns, name)
}

// Rule 1 with parents underlay creates: the same ID with the same
// configuration answers {} and changes nothing, the parent link included,
// also when many such requests race for a parent that does not exist yet.
func TestVMRuleSameIDReusedOnOwnedParents(t *testing.T) {
	t.Parallel()
	for _, k := range vmOwnedParents {
		t.Run(k.name, func(t *testing.T) {
			ns, d := vmSetup(t, itest.DaemonOptions{})
			a, b := vmNet(1), vmNet(2)
			pa, pb := k.link(a, "d0.10"), k.link(b, "d0.20")
			na := itest.Net{ID: a, Opts: k.opts("d0.10"), V4: vmPool4(1)}
			d.MustCreateNetwork(na)
			idx := k.want(t, ns, pa)
			vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
			for i := 0; i < 3; i++ {
				if msg := d.CreateNetwork(na); msg != "" {
					t.Fatalf("same-ID CreateNetwork %d answered %q, want {}", i, msg)
				}
			}
			if got := k.want(t, ns, pa); got != idx {
				t.Fatalf("parent %s re-created (index %d, was %d) by a same-ID create", pa, got, idx)
			}

			msgs := itest.Concurrently(16, func(int) string {
				return d.CreateNetwork(itest.Net{ID: b, Opts: k.opts("d0.20"), V4: vmPool4(2)})
			})
			for i, msg := range msgs {
				if msg != "" {
					t.Fatalf("concurrent same-ID create %d answered %q, want {}", i, msg)
				}
			}
			k.want(t, ns, pb)
			ns.WantLinks(vmWith(pa, pb, vmLink(vmEp(1)))...)
			wantRecords(t, d, 1, a, b)
			d.DeleteNetwork(a)
			d.DeleteNetwork(b)
			ns.WantLinks(vmBase...)
		})
	}
}

// Rule 2 with parents underlay creates: the same ID with another
// configuration is a stale duplicate; it is removed with its endpoint
// links and its parent link (unless another network still uses it), and
// the new one is created.
func TestVMRuleStaleDuplicateReplacedOnOwnedParents(t *testing.T) {
	t.Parallel()
	for _, k := range vmOwnedParents {
		t.Run(k.name, func(t *testing.T) {
			ns, d := vmSetup(t, itest.DaemonOptions{})
			a, b := vmNet(1), vmNet(2)
			pOld, pNew := k.link(a, "d0.10"), k.link(a, "d0.20")
			d.MustCreateNetwork(itest.Net{ID: a, Opts: k.opts("d0.10"), V4: vmPool4(1)})
			vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
			ns.WantLinks(vmWith(pOld, vmLink(vmEp(1)))...)

			// Another configuration: new parent for the VLAN, another
			// subnet, type and mode for both.
			opts := k.opts("d0.20")
			if opts == nil {
				opts = map[string]string{}
			}
			opts["type"], opts["ipvlan_mode"] = "ipvlan", "l3"
			d.MustCreateNetwork(itest.Net{ID: a, Opts: opts, V4: vmPool4(7), V6: vmPool6(7)})
			if !strings.Contains(d.Log(), "replacing stale duplicate") {
				t.Fatal("the replacement was not logged")
			}
			k.want(t, ns, pNew)
			ns.WantLinks(vmWith(pNew)...) // the old endpoint link (and VLAN) gone
			j := vmJoin(d, a, vmEp(2), vmAddr4(7, 10), vmAddr6(7, 10))
			if k.name == "dummy" {
				// Internal: no gateway, no routes.
				if j.Gateway != "" || j.GatewayIPv6 != "" || len(j.StaticRoutes) != 0 {
					t.Fatalf("Join on the internal network answered %+v", j)
				}
			} else {
				vmWantJoin(t, "l3", j, vmLink(vmEp(2)), "198.18.7.1", "2001:db8:7::1")
			}
			vmWantIpvlan(t, ns, vmLink(vmEp(2)), pNew, netlink.IPVLAN_MODE_L3, netlink.IPVLAN_FLAG_BRIDGE)
			wantRecords(t, d, 1, a)

			if k.name == "vlan" {
				// A VLAN another network still uses survives the replacement.
				d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d0.20", "ipvlan_mode": "l3"}, V4: vmPool4(8)})
				idx := k.want(t, ns, "d0.20")
				d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0.30"}, V4: vmPool4(7)})
				if got := k.want(t, ns, "d0.20"); got != idx {
					t.Fatalf("d0.20 re-created (index %d, was %d)", got, idx)
				}
				ns.WantLinks(vmWith("d0.20", "d0.30")...)
				d.DeleteNetwork(b)
			}
			d.DeleteNetwork(a)
			ns.WantLinks(vmBase...)
			wantRecords(t, d, 0)
		})
	}
}

// kill -9 and restart with parents underlay creates: the parent link and
// the endpoint links are kept as they are, the same-ID create answers {},
// an endpoint created before the crash joins with its MAC, and the parent
// goes with the network.
func TestVMRuleKill9AndRestartOnOwnedParents(t *testing.T) {
	t.Parallel()
	for _, k := range vmOwnedParents {
		t.Run(k.name, func(t *testing.T) {
			ns, d := vmSetup(t, itest.DaemonOptions{})
			a := vmNet(1)
			p := k.link(a, "d0.10")
			na := itest.Net{ID: a, Opts: k.opts("d0.10"), V4: vmPool4(1)}
			d.MustCreateNetwork(na)
			idx := k.want(t, ns, p)
			vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
			var ceB network.CreateEndpointResponse
			d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: a, EndpointID: vmEp(2),
				Interface: &network.EndpointInterface{Address: vmAddr4(1, 11)}}, &ceB)

			d.Restart()
			ns.WantLinks(vmWith(p, vmLink(vmEp(1)))...)
			if got := k.want(t, ns, p); got != idx {
				t.Fatalf("parent %s re-created (index %d, was %d) by the restart", p, got, idx)
			}
			if msg := d.CreateNetwork(na); msg != "" {
				t.Fatalf("same-ID CreateNetwork after kill -9 answered %q", msg)
			}
			d.RemoveEndpoint(a, vmEp(1))
			ns.WantLinks(vmWith(p)...)
			d.MustCall("Join", network.JoinRequest{NetworkID: a, EndpointID: vmEp(2)}, nil)
			if got := ns.MustLink(vmLink(vmEp(2))).Attrs().HardwareAddr.String(); got != ceB.Interface.MacAddress {
				t.Fatalf("MAC after restart %s, want %s", got, ceB.Interface.MacAddress)
			}
			vmWantMacvlan(t, ns, vmLink(vmEp(2)), p, netlink.MACVLAN_MODE_BRIDGE)
			d.RemoveEndpoint(a, vmEp(2))
			d.DeleteNetwork(a)
			ns.WantLinks(vmBase...)
			wantRecords(t, d, 0)
		})
	}
}

// kill -9 at the steps of CreateNetwork and DeleteNetwork around the
// parent link and the store: after the restart a create that never
// answered left nothing (no parent link, no record), and a delete is
// either not done (the network is whole and Docker's retry removes it) or
// done, its parent link included.
func TestVMCrashPointsOnOwnedParents(t *testing.T) {
	t.Parallel()
	for _, k := range vmOwnedParents {
		for _, tc := range []struct {
			point string
			// deleted: the network (and so its parent) is gone after the
			// restart; otherwise it is whole, with its endpoint's link
			// unless keptLink is false.
			deleted, keptLink bool
		}{
			{point: "create-network/after-reserve"},
			{point: "create-network/after-parent-link"},
			{point: "create-network/before-commit"},
			{point: "delete-network/before-link-delete", keptLink: true},
			{point: "delete-network/before-commit"},
			{point: "delete-network/after-commit", deleted: true},
			{point: "delete-network/before-parent-delete", deleted: true},
		} {
			t.Run(k.name+"/"+tc.point, func(t *testing.T) {
				ns, d := vmSetup(t, itest.DaemonOptions{Env: []string{"UNDERLAY_CRASH_AT=" + tc.point}})
				a := vmNet(1)
				p := k.link(a, "d0.10")
				na := itest.Net{ID: a, Opts: k.opts("d0.10"), V4: vmPool4(1)}
				creating := strings.HasPrefix(tc.point, "create-network/")
				var req any = na.Request()
				route := "/NetworkDriver.CreateNetwork"
				if !creating {
					d.MustCreateNetwork(na)
					vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
					req, route = network.DeleteNetworkRequest{NetworkID: a}, "/NetworkDriver.DeleteNetwork"
				}
				if code, body, err := d.Post(route, req); err == nil {
					t.Fatalf("%s answered %d %s: the daemon did not stop at crash point %s (is it built with -tags crashpoints?)", route, code, body, tc.point)
				}
				<-d.Exited()
				if ws, ok := d.ProcessState().Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("daemon ended with %v, want SIGKILL at %s", d.ProcessState(), tc.point)
				}

				d = itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: filepath.Dir(d.State)})
				switch {
				case creating || tc.deleted:
					ns.WantLinks(vmBase...)
					wantRecords(t, d, 0)
				case tc.keptLink:
					ns.WantLinks(vmWith(p, vmLink(vmEp(1)))...)
					wantRecords(t, d, 1, a)
				default:
					ns.WantLinks(vmWith(p)...)
					wantRecords(t, d, 1, a)
				}
				if creating {
					// Docker saw the create fail; the user tries again.
					d.MustCreateNetwork(na)
					k.want(t, ns, p)
					vmJoin(d, a, vmEp(1), vmAddr4(1, 10), "")
				}
				// Docker retries the delete (or deletes the new network).
				d.DeleteNetwork(a)
				ns.WantLinks(vmBase...)
				wantRecords(t, d, 0)
			})
		}
	}
}
