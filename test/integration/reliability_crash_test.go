//go:build vm

package integration

import (
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver"
	"github.com/underlay-net/underlay/internal/itest"
)

// crashScenario prepares the state a crash point is reached from, and the
// request that reaches it.
type crashScenario struct {
	prepare func(d *itest.Daemon)
	route   string
	req     any
	// links that must exist once the retried request succeeded.
	after []string
}

var (
	crashNet     = itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0.10"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}}
	crashNetNew  = itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0.20", "mtu": "1400"}, V4: []string{"198.18.2.0/24"}}
	crashCreateE = network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA, Interface: &network.EndpointInterface{Address: "198.18.1.10/24"}}
	crashJoin    = network.JoinRequest{NetworkID: netA, EndpointID: epA, SandboxKey: "/var/run/docker/netns/crash"}
)

func joined(d *itest.Daemon) {
	d.MustCreateNetwork(crashNet)
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
}

func crashScenarios() map[string]crashScenario {
	s := map[string]crashScenario{}
	for _, p := range []string{"before-reserve", "after-reserve", "before-parent-link", "after-parent-link", "before-commit", "after-commit"} {
		s["create-network/"+p] = crashScenario{route: "CreateNetwork", req: crashNet.Request(), after: []string{"vp0.10"}}
	}
	for _, p := range []string{"before-remove-stale", "after-remove-stale"} {
		s["create-network/"+p] = crashScenario{prepare: joined, route: "CreateNetwork", req: crashNetNew.Request(), after: []string{"vp0.20"}}
	}
	for _, p := range []string{"before-commit", "after-commit"} {
		s["create-endpoint/"+p] = crashScenario{prepare: func(d *itest.Daemon) { d.MustCreateNetwork(crashNet) },
			route: "CreateEndpoint", req: crashCreateE, after: []string{"vp0.10"}}
	}
	for _, p := range []string{"before-link", "after-link"} {
		s["join/"+p] = crashScenario{prepare: func(d *itest.Daemon) {
			d.MustCreateNetwork(crashNet)
			d.MustCall("CreateEndpoint", crashCreateE, nil)
		}, route: "Join", req: crashJoin, after: []string{"vp0.10", linkA}}
	}
	for _, p := range []string{"before-link-delete", "after-link-delete"} {
		s["leave/"+p] = crashScenario{prepare: joined, route: "Leave",
			req: network.LeaveRequest{NetworkID: netA, EndpointID: epA}, after: []string{"vp0.10"}}
	}
	for _, p := range []string{"before-link-delete", "after-link-delete", "before-commit", "after-commit"} {
		s["delete-endpoint/"+p] = crashScenario{prepare: joined, route: "DeleteEndpoint",
			req: network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}, after: []string{"vp0.10"}}
	}
	for _, p := range []string{"before-link-delete", "after-link-delete", "before-commit", "after-commit", "before-parent-delete", "after-parent-delete"} {
		s["delete-network/"+p] = crashScenario{prepare: joined, route: "DeleteNetwork",
			req: network.DeleteNetworkRequest{NetworkID: netA}}
	}
	return s
}

// TestCrashAtEveryPoint kills the real binary with SIGKILL at every named
// crash point. After the restart the state file and the kernel agree, and
// Docker's next call (the same request again) succeeds; deleting
// everything then leaves nothing.
func TestCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	scenarios := crashScenarios()
	points := driver.CrashPoints()
	if len(scenarios) != len(points) {
		t.Fatalf("%d scenarios for %d crash points", len(scenarios), len(points))
	}
	for _, point := range points {
		sc, ok := scenarios[point]
		if !ok {
			t.Fatalf("no scenario reaches crash point %s", point)
		}
		t.Run(strings.ReplaceAll(point, "/", "_"), func(t *testing.T) {
			ns := itest.NewNetns(t)
			ns.AddVeth("vp0", "vp0-peer", 1500)
			dir := t.TempDir()
			d := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: dir})
			if sc.prepare != nil {
				sc.prepare(d)
			}
			// Arm the point and send the request: the daemon dies mid-way.
			d.Kill()
			armed := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: dir, Env: []string{"UNDERLAY_CRASH_AT=" + point}})
			if _, _, err := armed.Post("/NetworkDriver."+sc.route, sc.req); err == nil {
				t.Fatalf("the request survived crash point %s", point)
			}
			<-armed.Exited()
			if !strings.Contains(armed.ProcessState().String(), "killed") {
				t.Fatalf("daemon exited with %v, want killed at %s", armed.ProcessState(), point)
			}
			d.Start()
			d.CheckConsistent()
			if msg := d.Call(sc.route, sc.req, nil); msg != "" {
				t.Fatalf("the retried %s after the crash answered %q", sc.route, msg)
			}
			ns.WantLinks(append([]string{"lo", "vp0", "vp0-peer"}, sc.after...)...)
			d.CheckConsistent()
			d.MustCall("Leave", network.LeaveRequest{NetworkID: netA, EndpointID: epA}, nil)
			d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}, nil)
			d.DeleteNetwork(netA)
			ns.WantLinks("lo", "vp0", "vp0-peer")
			d.CheckConsistent().WantEmpty(t)
		})
	}
}
