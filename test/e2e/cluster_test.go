//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// cluster is a swarm of the suite's engine (node 1, the manager) and the
// extra nodes (workers), wired to one LAN.
type cluster struct {
	e     *env
	nodes []*node
	// base is each node's link list once its plugin runs, before swarm
	// and docker_gwbridge: what teardown must come back to.
	base map[string][]string
}

func (c *cluster) manager() *node { return c.nodes[0] }

// startCluster starts the extra nodes, wires every node to the LAN,
// installs and enables the plugin (global scope) on each before it joins,
// and forms the swarm. Cleanup tears the extra nodes down and gives node 1
// back to the suite as it was: out of swarm, plugin at local scope.
func startCluster(t *testing.T, e *env) *cluster {
	t.Helper()
	c := &cluster{e: e, nodes: []*node{suiteNode()}, base: map[string][]string{}}
	for i := 2; i <= 1+extraNodes; i++ {
		c.nodes = append(c.nodes, extraNode(i))
	}
	if err := teardownNodes(); err != nil {
		t.Fatalf("clean up after an earlier test: %v", err)
	}
	t.Cleanup(func() { c.close(t) })
	if err := makeLAN(); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dataDir, "bb-image.tar")
	e.must(t, "save", "-o", tarball, imageTag)
	for _, n := range c.nodes {
		if err := n.wire(); err != nil {
			t.Fatal(err)
		}
		if n.suite() {
			// The suite's plugin, at global scope for the swarm.
			e.ensurePlugin(t)
			e.disablePlugin(t)
			n.must(t, append([]string{"plugin", "set", plugin}, n.pluginSettings()...)...)
			n.must(t, "plugin", "enable", plugin)
			continue
		}
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		n.loadImage(t, tarball)
		n.installPlugin(t)
	}
	for _, n := range c.nodes {
		eventually(t, 30*time.Second, n.name+": plugin process running", func() error {
			if p := n.pluginPids(); len(p) != 1 {
				return fmt.Errorf("plugin processes %v in %s, want one", p, n.ns)
			}
			return nil
		})
		l, err := linkNames(n.ns)
		if err != nil {
			t.Fatal(err)
		}
		c.base[n.name] = l
	}
	c.formSwarm(t)
	return c
}

// formSwarm makes node 1 the manager and the others workers. Each node's
// docker_gwbridge is created first with an address in 198.18.252.0/24
// (Docker would otherwise take one from 172.16.0.0/12), and the ingress
// network's pool is 198.18.248.0/21.
func (c *cluster) formSwarm(t *testing.T) {
	t.Helper()
	for i, n := range c.nodes {
		if _, err := n.docker("network", "inspect", "docker_gwbridge"); err == nil {
			n.must(t, "network", "rm", "docker_gwbridge")
		}
		n.must(t, "network", "create", "-d", "bridge", "--subnet", fmt.Sprintf("198.18.252.%d/26", 64*i),
			"-o", "com.docker.network.bridge.name=docker_gwbridge",
			"-o", "com.docker.network.bridge.enable_icc=false",
			"-o", "com.docker.network.bridge.enable_ip_masquerade=false", "docker_gwbridge")
	}
	m := c.manager()
	m.must(t, "swarm", "init", "--advertise-addr", m.ctlIP, "--listen-addr", m.ctlIP+":2377",
		"--default-addr-pool", "198.18.248.0/21", "--default-addr-pool-mask-length", "24")
	token := m.must(t, "swarm", "join-token", "-q", "worker")
	for _, n := range c.nodes[1:] {
		n.must(t, "swarm", "join", "--advertise-addr", n.ctlIP, "--listen-addr", n.ctlIP+":2377",
			"--token", token, m.ctlIP+":2377")
	}
	for _, n := range c.nodes {
		n.id = n.must(t, "info", "-f", "{{.Swarm.NodeID}}")
	}
	// The scheduler places tasks only on nodes whose description lists
	// the plugin (installed before joining, so listed at once).
	c.waitNodes(t, 60*time.Second, "ready and listing the plugin", func(state, plugins string) bool {
		return state == "ready" && strings.Contains(plugins, `{"Type":"Network","Name":"`+plugin+`"}`)
	})
}

// waitNodes waits until every node, as the manager sees it, passes ok.
func (c *cluster) waitNodes(t *testing.T, timeout time.Duration, what string, ok func(state, plugins string) bool) {
	t.Helper()
	eventually(t, timeout, "every node "+what, func() error {
		for _, n := range c.nodes {
			out, err := c.manager().docker("node", "inspect", n.id, "-f", "{{.Status.State}} {{json .Description.Engine.Plugins}}")
			if err != nil {
				return err
			}
			state, plugins, _ := strings.Cut(out, " ")
			if !ok(state, plugins) {
				return fmt.Errorf("%s (%s): %s", n.name, n.id, out)
			}
		}
		return nil
	})
}

// nodeState waits until the manager reports node n in state.
func (c *cluster) nodeState(t *testing.T, n *node, state string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, n.name+" "+state+" for the manager", func() error {
		out, err := c.manager().docker("node", "inspect", n.id, "-f", "{{.Status.State}}")
		if err != nil || out != state {
			return fmt.Errorf("state %q (%v)", out, err)
		}
		return nil
	})
}

// close gives node 1 back to the suite (out of swarm, no service or
// network left, plugin with the suite's settings) and tears the extra
// nodes down; the logs of a failed test are kept first.
func (c *cluster) close(t *testing.T) {
	m := c.manager()
	if t.Failed() {
		for _, n := range c.nodes {
			t.Logf("%s: dockerd's log (last lines):\n%s", n.name, itest.TailLines(readFile(n.logPath()), 60))
		}
		keepNodeLogs()
	}
	// The extra nodes first: node 1's plugin, restarted below with the
	// machine's /run, must not copy their namespace mounts.
	if err := teardownNodes(c.nodes[1:]...); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if m.ping() == nil {
		if ids, err := m.docker("service", "ls", "-q"); err == nil && ids != "" {
			_, _ = m.docker(append([]string{"service", "rm"}, strings.Fields(ids)...)...)
		}
		_, _ = m.docker("swarm", "leave", "--force")
		if ids, err := m.docker("ps", "-aq", "--filter", "label=com.docker.swarm.service.name"); err == nil && ids != "" {
			_, _ = m.docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		c.e.removeEventually("docker_gwbridge", 30*time.Second)
		if out, _ := m.docker("plugin", "inspect", "-f", "{{.Settings.Env}}", plugin); strings.Contains(out, "SCOPE=global") {
			c.e.disablePlugin(t)
			m.must(t, append([]string{"plugin", "set", plugin}, pluginSettings...)...)
			m.must(t, "plugin", "enable", plugin)
		}
	}
	_ = os.Remove(filepath.Join(dataDir, "bb-image.tar"))
	c.e.wantNoLeak(t, "after the multi-node test gave node 1 back")
}
