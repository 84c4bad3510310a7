//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// teardown removes the services and networks, takes every node out of the
// swarm and removes its docker_gwbridge, then checks that no link of the
// plugin remains on any node and every node's links are as after setup.
func (c *cluster) teardown(t *testing.T, services []service, nets ...string) {
	t.Helper()
	m := c.manager()
	// What an earlier sub-test that failed may not have made is skipped.
	for _, s := range serviceNames(services) {
		if _, err := m.docker("service", "inspect", s); err == nil {
			m.must(t, "service", "rm", s)
		}
	}
	eventually(t, 90*time.Second, "service containers gone on every node", func() error {
		for _, n := range c.nodes {
			if out, err := n.docker("ps", "-aq", "--filter", "label=com.docker.swarm.service.name"); err != nil || out != "" {
				return fmt.Errorf("%s: containers %q (%v)", n.name, out, err)
			}
		}
		return nil
	})
	for _, n := range nets {
		if _, err := m.docker("network", "inspect", n); err == nil {
			m.must(t, "network", "rm", n)
		}
	}
	// A swarm network's node copy lingers a few seconds after network rm.
	eventually(t, 60*time.Second, "no network of the plugin on any node", func() error {
		for _, n := range c.nodes {
			if out, err := n.docker("network", "ls", "-q", "--filter", "driver="+plugin); err != nil || out != "" {
				return fmt.Errorf("%s: networks %q (%v)", n.name, out, err)
			}
		}
		return nil
	})
	for _, n := range c.nodes[1:] {
		n.must(t, "swarm", "leave")
	}
	m.must(t, "swarm", "leave", "--force")
	for _, n := range c.nodes {
		eventually(t, 30*time.Second, n.name+": docker network rm docker_gwbridge", func() error {
			_, err := n.docker("network", "rm", "docker_gwbridge")
			return err
		})
	}
	if l, err := pluginLinks(lanNS); err != nil || len(l) > 0 {
		t.Errorf("links of the plugin in %s: %v (%v)", lanNS, l, err)
	}
	for _, n := range c.nodes {
		within(t, 15*time.Second, n.name+": no link of the plugin, links as after setup", func() error {
			if l, err := pluginLinks(n.ns); err != nil || len(l) > 0 {
				return fmt.Errorf("links of the plugin in %s: %v (%v)", n.ns, l, err)
			}
			got, err := linkNames(n.ns)
			if err != nil {
				return err
			}
			extra, missing := diffNames(got, c.base[n.name])
			if len(missing) > 0 {
				return fmt.Errorf("links %v of %s after setup are gone", missing, n.ns)
			}
			if len(extra) > 0 {
				return fmt.Errorf("links in %s %v, after setup %v", n.ns, got, c.base[n.name])
			}
			return nil
		}, func() { c.linkDiag(t, n) })
	}
	// Namespaces that only mounts in plugins hold: a plugin keeping an old
	// sandbox alive (as its copy of /run did before it mounted /run
	// without the mounts below it).
	for _, h := range c.foreignNS(t) {
		pluginOnly := len(h.holds) > 0
		for _, x := range h.holds {
			pluginOnly = pluginOnly && x.plugin()
		}
		if !pluginOnly {
			continue
		}
		var names []string
		if ls, err := linksAt(h.path); err == nil {
			for _, l := range ls {
				names = append(names, fmt.Sprintf("%s (%s)", l.Attrs().Name, l.Type()))
			}
		}
		t.Errorf("namespace left after teardown: %s, links %v", h, names)
	}
}

// diffNames returns the names only in a and those only in b.
func diffNames(a, b []string) (onlyA, onlyB []string) {
	in := func(s []string, x string) bool {
		for _, y := range s {
			if y == x {
				return true
			}
		}
		return false
	}
	for _, x := range a {
		if !in(b, x) {
			onlyA = append(onlyA, x)
		}
	}
	for _, x := range b {
		if !in(a, x) {
			onlyB = append(onlyB, x)
		}
	}
	return onlyA, onlyB
}

// linkDiag logs where a node's leftover links may come from: its links
// in detail, the sandbox namespaces dockerd still has mounted, and which
// plugin processes still hold those mounts.
func (c *cluster) linkDiag(t *testing.T, n *node) {
	out, _ := exec.Command("ip", "-n", n.ns, "-d", "link", "show").CombinedOutput()
	t.Logf("%s: links:\n%s", n.name, out)
	sandboxes := filepath.Join(n.execRoot(), "netns")
	ents, _ := os.ReadDir(sandboxes)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	t.Logf("%s: %s holds %v", n.name, sandboxes, names)
	for _, l := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		if strings.Contains(l, sandboxes) {
			t.Logf("%s: mounted: %s", n.name, l)
		}
	}
	for _, o := range c.nodes {
		for _, pid := range o.pluginPids() {
			if k := strings.Count(readFile(fmt.Sprintf("/proc/%d/mountinfo", pid)), sandboxes); k > 0 {
				t.Logf("%s's plugin (pid %d) has %d mounts under %s", o.name, pid, k, sandboxes)
			}
		}
	}
}
