//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 12: one swarm network definition on nodes whose NICs have other
// names. Three engines on this machine, each in its own namespace with its
// own plugin state, in one swarm (node 1, the suite's engine, manages);
// every node's LAN link (lana, lanb, lanc) is on one L2 bridge. A network
// with a candidate list (parent=lana,lanb,lanc) and one with parent=auto
// run tasks on every node, each on its own node's LAN link, with addresses
// unique across the cluster, reaching each other across nodes; they still
// do after a worker's clean restart and another node's loss (SIGKILL) and
// rejoin, without a network error in any dockerd log; teardown leaves no
// link of the plugin on any node.
func TestMultiNode(t *testing.T) {
	e := need(t)
	start := time.Now()
	c := startCluster(t, e)
	t.Logf("%d-node swarm formed in %s", len(c.nodes), time.Since(start).Round(time.Millisecond))
	defer func() { t.Logf("TestMultiNode took %s", time.Since(start).Round(time.Millisecond)) }()
	m := c.manager()

	cand := []service{
		{name: "candg", net: "cand", prefix: "198.18.40.", global: true},
		{name: "candr", net: "cand", prefix: "198.18.40.", replicas: 30},
	}
	auto := []service{{name: "autog", net: "autonet", prefix: "198.18.41.", global: true}}
	all := append(append([]service{}, cand...), auto...)

	timed(t, "candidate list, global mode + 30 replicas", func(t *testing.T) {
		mk := c.markLogs()
		m.must(t, "network", "create", "-d", plugin, "--subnet", "198.18.40.0/24", "--gateway", "198.18.40.1",
			"-o", "parent=lana,lanb,lanc", "--attachable", "cand")
		c.wantSwarmNetwork(t, "cand", "lana,lanb,lanc")
		for _, s := range cand {
			c.createService(t, s)
		}
		tasks := c.settle(t, cand, 4*time.Minute)
		c.checkTasks(t, tasks)
		c.checkHolders(t, tasks)
		c.crossPing(t, tasks)
		c.checkPluginState(t)
		t.Logf("virtual IPs (vip endpoint mode): %s", m.must(t, "service", "inspect", "-f", "{{.Spec.Name}} {{json .Endpoint.VirtualIPs}}", "candg", "candr"))
		c.wantNoNetworkErrors(t, mk, "since the network was created")
	})
	timed(t, "auto", func(t *testing.T) {
		mk := c.markLogs()
		m.must(t, "network", "create", "-d", plugin, "--subnet", lanPrefix, "--gateway", "198.18.41.1",
			"--ip-range", "198.18.41.128/25", "-o", "parent=auto", "--attachable", "autonet")
		c.wantSwarmNetwork(t, "autonet", "auto")
		c.createService(t, auto[0])
		tasks := c.settle(t, auto, 2*time.Minute)
		c.checkTasks(t, tasks)
		c.checkHolders(t, tasks)
		c.crossPing(t, tasks)
		c.wantNoNetworkErrors(t, mk, "since the network was created")
	})
	timed(t, "restarts and node loss", func(t *testing.T) {
		if _, err := c.converged(all); err != nil {
			t.Skipf("the services did not run before the restarts: %v", err)
		}
		// A worker's clean restart: its tasks stop with dockerd and are
		// replaced when it is back.
		w := c.nodes[1]
		mk := c.markLogs()
		w.restart(t)
		tasks := c.settle(t, all, 4*time.Minute)
		c.checkTasks(t, tasks)
		c.checkHolders(t, tasks)
		c.crossPing(t, tasks)
		c.wantNoNetworkErrors(t, mk, "since "+w.name+"'s clean restart")

		// Node loss: SIGKILL another node's dockerd (containerd dies with
		// it; its tasks' containers and its plugin keep running) and wait
		// until the manager declares it down and reschedules its replicas;
		// then start it again: the swarm state is in its data root, so it
		// rejoins by itself, and its old containers are killed at start.
		l := c.nodes[2]
		mk = c.markLogs()
		down := time.Now()
		l.kill(t)
		c.nodeState(t, l, "down", 90*time.Second)
		t.Logf("%s down for the manager after %s", l.name, time.Since(down).Round(time.Millisecond))
		if err := l.start(); err != nil {
			t.Fatal(err)
		}
		c.nodeState(t, l, "ready", 90*time.Second)
		tasks = c.settle(t, all, 4*time.Minute)
		c.checkTasks(t, tasks)
		c.checkHolders(t, tasks)
		c.crossPing(t, tasks)
		c.wantNoNetworkErrors(t, mk, "since "+l.name+"'s dockerd was killed")
	})
	timed(t, "teardown", func(t *testing.T) {
		c.teardown(t, all, "cand", "autonet")
	})
}

// timed runs a sub-test and logs how long it took.
func timed(t *testing.T, name string, f func(t *testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		start := time.Now()
		defer func() { t.Logf("sub-test %q took %s", name, time.Since(start).Round(time.Millisecond)) }()
		f(t)
	})
}

// wantSwarmNetwork checks that the network is a swarm network keeping its
// parent option as given.
func (c *cluster) wantSwarmNetwork(t *testing.T, name, parent string) {
	t.Helper()
	var ni []netInspect
	if err := c.e.jsonOut(&ni, "network", "inspect", name); err != nil {
		t.Fatal(err)
	}
	if ni[0].Scope != "swarm" || ni[0].Options["parent"] != parent {
		t.Errorf("%s: scope %s, options %v; want a swarm network with parent %s", name, ni[0].Scope, ni[0].Options, parent)
	}
}

// checkPluginState checks that every engine keeps its own plugin state:
// <data-root>/plugins/<id>/propagated-mount/underlay.db exists on each
// node and they are distinct files.
func (c *cluster) checkPluginState(t *testing.T) {
	t.Helper()
	var files []os.FileInfo
	var paths []string
	for _, n := range c.nodes {
		id := n.must(t, "plugin", "inspect", "-f", "{{.ID}}", plugin)
		p := filepath.Join(n.dataRoot(), "plugins", id, "propagated-mount", "underlay.db")
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: plugin state: %v", n.name, err)
			continue
		}
		for i, o := range files {
			if os.SameFile(o, fi) {
				t.Errorf("%s and %s are the same file", paths[i], p)
			}
		}
		files, paths = append(files, fi), append(paths, p)
	}
	t.Logf("plugin state files:\n%s", strings.Join(paths, "\n"))
}
