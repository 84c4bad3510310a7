//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
)

// Point 4: dockerd restarted with --restart=always containers running, the
// plugin force-disabled and enabled, the plugin process killed: each time
// the containers come back (same addresses, same MAC) and reach each other,
// new containers start, nothing is done by hand, and no link leaks.
func TestRestarts(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	e.network(t, "n4", "-d", plugin, "--ipv6",
		"--subnet", "198.18.4.0/24", "--gateway", "198.18.4.1",
		"--subnet", "2001:db8:4::/64", "--gateway", "2001:db8:4::1", "-o", "parent=vp4")
	a := e.run(t, ctr{name: "c4a", ip: "198.18.4.10", ip6: "2001:db8:4::10", mac: "02:42:c6:12:04:0a"}, "n4", "--restart=always")
	b := e.run(t, ctr{name: "c4b", ip: "198.18.4.11", ip6: "2001:db8:4::11", mac: "02:42:c6:12:04:0b"}, "n4", "--restart=always")
	e.pingAll(t, a, b)
	e.wantNoLeak(t, "with the containers running")

	check := func(phase string) {
		t.Helper()
		e.waitRunning(t, 90*time.Second, a.name, b.name)
		for _, c := range []ctr{a, b} {
			if v := e.containerView(t, c.name); v["mac"] != c.mac || !strings.Contains(v["ipv4"], c.ip+"/24") || !strings.Contains(v["ipv6"], c.ip6+"/64") {
				t.Errorf("after %s, %s sees %v; want MAC %s, %s, %s", phase, c.name, v, c.mac, c.ip, c.ip6)
			}
		}
		e.pingAll(t, a, b)
		e.oneShot(t, "n4", "198.18.4.20", a.ip)
		e.wantNoLeak(t, "after "+phase)
	}

	t.Run("dockerd restart", func(t *testing.T) {
		e.restartDockerd(t)
		check("a dockerd restart")
	})
	t.Run("plugin disable -f and enable", func(t *testing.T) {
		e.must(t, "plugin", "disable", "-f", plugin)
		eventually(t, 30*time.Second, "plugin process gone", func() error {
			if p := pluginPids(); len(p) > 0 {
				return fmt.Errorf("still running: %v", p)
			}
			return nil
		})
		e.waitRunning(t, 5*time.Second, a.name, b.name)
		e.must(t, "plugin", "enable", plugin)
		check("the plugin was disabled and enabled")
	})
	t.Run("plugin killed", func(t *testing.T) {
		e.killPlugin(t)
		check("the plugin process was killed")
	})

	e.must(t, "rm", "-f", a.name, b.name)
	e.must(t, "network", "rm", "n4")
	e.wantNoLeak(t, "after the network was removed")
}

// Point 5: a network removed while the plugin could not see it leaves a
// stale record on its parent; the next network on that parent asks Docker,
// learns the holder is gone, and is created.
func TestStaleHolder(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	stale := e.network(t, "n5", "-d", plugin, "--subnet", "198.18.5.0/24", "-o", "parent=vp5")
	e.must(t, "plugin", "disable", "-f", plugin)
	// The plugin is down: Docker removes the network without telling it.
	e.must(t, "network", "rm", "n5")
	e.must(t, "plugin", "enable", plugin)

	// Same parent, same subnet: conflicts with the stale record.
	id := e.network(t, "n5b", "-d", plugin, "--subnet", "198.18.5.0/24", "-o", "parent=vp5", "-o", "macvlan_mode=bridge")
	// The plugin logs the removal before it answers, but the line reaches
	// dockerd's log through the engine's relay, after network create
	// returns.
	if _, ok := e.waitLogSinceMark(func(log string) bool {
		return strings.Contains(log, "removing stale holder") && strings.Contains(log, stale)
	}); !ok {
		t.Errorf("the plugin's log does not report removing stale holder %s", dockerid.Short(stale))
	}
	a := e.run(t, ctr{name: "c5a", ip: "198.18.5.10"}, "n5b")
	b := e.run(t, ctr{name: "c5b", ip: "198.18.5.11"}, "n5b")
	e.pingAll(t, a, b)

	// And the live holder now blocks a conflicting network again.
	e.wantRefused(t, "n5pt", "vp5", id, "exclusively", "--subnet", "198.18.50.0/24", "-o", "parent=vp5", "-o", "macvlan_mode=passthru")
	e.must(t, "rm", "-f", a.name, b.name)
	e.must(t, "network", "rm", "n5b")
	e.wantNoLeak(t, "after the networks were removed")
}
