//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Point 8: docker network rm, docker plugin disable and rm leave nothing:
// no link, no socket under /run/docker/plugins, no process, no mount; the
// state file lives in the plugin's propagated mount and goes with `docker
// plugin rm` (it is kept across disable/enable, restarts and upgrades).
func TestTeardown(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	id := e.pluginID(t)
	sockDir := filepath.Join("/run/docker/plugins", id)
	pluginDir := filepath.Join(dataDir, "root", "plugins", id)
	state := filepath.Join(pluginDir, "propagated-mount", "underlay.db")

	e.network(t, "n8", "-d", plugin, "--subnet", "198.18.9.0/24", "-o", "parent=vp9")
	e.run(t, ctr{name: "c8a", ip: "198.18.9.10"}, "n8")
	e.oneShot(t, "n8", "198.18.9.11", "198.18.9.10")
	for _, p := range []string{filepath.Join(sockDir, "underlay.sock"), state} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("while the plugin runs: %v", err)
		}
	}
	e.must(t, "rm", "-f", "c8a")
	e.must(t, "network", "rm", "n8")
	e.wantNoLeak(t, "after network rm")

	e.must(t, "plugin", "disable", plugin)
	eventually(t, 30*time.Second, "plugin stopped and its socket gone", func() error {
		if p := pluginPids(); len(p) > 0 {
			return fmt.Errorf("plugin processes %v", p)
		}
		if _, err := os.Stat(filepath.Join(sockDir, "underlay.sock")); err == nil {
			return fmt.Errorf("%s/underlay.sock still there", sockDir)
		}
		return nil
	})
	if _, err := os.Stat(state); err != nil {
		t.Errorf("a disabled plugin keeps its state: %v", err)
	}

	e.must(t, "plugin", "rm", plugin)
	eventually(t, 30*time.Second, "nothing of the plugin left", func() error {
		for _, p := range []string{sockDir, pluginDir} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s still there", p)
			}
		}
		if strings.Contains(readFile("/proc/self/mountinfo"), pluginDir) {
			return fmt.Errorf("mounts under %s", pluginDir)
		}
		return nil
	})
	if out := e.must(t, "plugin", "ls", "-q"); out != "" {
		t.Errorf("plugins left: %s", out)
	}
	e.wantNoLeak(t, "after plugin rm")
}
