//go:build e2e

package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// dockerd's log holds its own lines and the plugin's. dockerd logs
// everything a plugin writes to stderr at level=error, with the plugin's
// own line (and its level) in msg and plugin=ID at the end; for those the
// plugin's level counts.
var (
	pluginLine   = regexp.MustCompile(`level=error msg="time=\S+ level=([A-Z]+) .*" plugin=[0-9a-f]{64}$`)
	dockerdError = regexp.MustCompile(`level=error `)
	// networkWords are what makes a dockerd error line a network error.
	networkWords = regexp.MustCompile(`(?i)underlay|network|endpoint|sandbox|driver|plugin`)
)

// ignoredErrors are the dockerd error lines with a network word that the
// check lets through, each with why. ok, when set, must hold too: it gets
// the pattern's submatches and the node's log since the mark.
var ignoredErrors = []struct {
	re *regexp.Regexp
	ok func(m []string, log string) bool
}{
	// Swarm gives a service in the default endpoint mode (vip) a virtual
	// IP on each of its networks, and every node then adds each task as a
	// backend of that VIP in the network's load-balancing endpoint. Docker
	// 20.10 creates that endpoint only for overlay networks (daemon/
	// network.go: `if agent && driver == "overlay"` →
	// NetworkOptionLBEndpoint), so on any other swarm network (the
	// built-in macvlan's too) each task start logs this on every node.
	// VIP load balancing is Docker's, not the plugin's, and does not exist
	// on such networks; the tasks' own addresses are checked.
	{re: regexp.MustCompile(`level=error msg="addLBBackend \S+/\S+: Unable to find load balancing endpoint for network \S+"$`)},
	// A dockerd that stops (the clean restart of a node) takes its
	// containerd with it; libcontainerd's event stream for the managed
	// plugins' namespace (plugins.moby: "plugin" is one of networkWords)
	// ends with this when the connection closes first. It names no
	// network, endpoint or driver; seen once, under load, in a make test
	// run (20.10, TestMultiNode's clean restart of n2).
	{re: regexp.MustCompile(`level=error msg="Failed to get event" error="rpc error: code = Unavailable desc = transport is closing" module=libcontainerd namespace=plugins\.moby$`)},
	// When a task goes, swarm's executor removes its networks from the
	// node if no other endpoint uses them (containerAdapter.removeNetworks).
	// When many tasks of one network stop at once (a clean dockerd stop),
	// their removals race: one deletes the network (the plugin logs
	// "deleted network" for it), the others find it gone, and libnetwork's
	// ErrNoSuchNetwork reaches the executor wrapped ("error while removing
	// network: …", daemon.deleteNetwork), so its `case
	// libnetwork.ErrNoSuchNetwork: continue` misses it and it logs this.
	// Ignored only when the plugin deleted that network on the same node
	// since the mark.
	{
		re: regexp.MustCompile(`level=error msg="network (\S+) remove failed: error while removing network: unknown network (\S+) id (\S+)" module=node/agent`),
		ok: func(m []string, log string) bool {
			return m[1] == m[2] && strings.Contains(log, `deleted network\" network=`+m[3]+" ")
		},
	},
	// The same race seen by swarm's task manager, which then logs the
	// executor's error for the stopping task once more (swarmkit
	// agent/exec: "fatal task error"). First seen (with the next entry) in
	// the first run after DeleteEndpoint began answering before the
	// kernel's cleanup of the link, which brings the tasks' removals
	// closer together; a correlation, not shown to be the cause. Same
	// condition.
	{
		re: regexp.MustCompile(`level=error msg="fatal task error" error="error while removing network: unknown network \S+ id (\S+)" module=node/agent/taskmanager`),
		ok: func(m []string, log string) bool { return strings.Contains(log, `deleted network\" network=`+m[1]+" ") },
	},
	// networkDB (libnetwork's gossip of swarm networks' service records)
	// syncs each network with its peers every 30 s; while a node the test
	// killed or restarted is down, a peer's sync to that node's gossip port
	// (7946 on the swarm's control addresses) is refused. Docker's gossip,
	// not the plugin's; seen once, under load, in a make test run (20.10,
	// TestMultiNode's kill -9 of n3: "dial tcp …: connect: connection
	// refused"). A peer killed or stopping while a sync runs ends it with
	// a read or write error on that connection instead (a reset, EOF, a
	// timeout). Ignored only for a TCP error with a node's control address
	// (198.18.254.N) on the gossip port.
	{
		re: regexp.MustCompile(`level=error msg="periodic bulk sync failure for network \S+: bulk sync to node \S+ failed: failed to send a TCP message during bulk sync: (dial|read|write) tcp \S*198\.18\.254\.\d+:7946\b[^"]*"$`),
	},
	// Once the node has removed the network, the service records other
	// nodes gossip for it (libnetwork's networkDB, addServiceBinding) name
	// a network the node no longer has, until the node joins it again.
	// Ignored only when the plugin deleted that network on the node since
	// the mark.
	{
		re: regexp.MustCompile(`level=error msg="failed adding service binding for \S+ epRec:\{.*\} err:network (\S+) not found"$`),
		ok: func(m []string, log string) bool { return strings.Contains(log, `deleted network\" network=`+m[1]+" ") },
	},
}

// marks are each node's log size before an event.
type marks map[string]int64

func (c *cluster) markLogs() marks {
	m := marks{}
	for _, n := range c.nodes {
		m[n.name] = n.logSize()
	}
	return m
}

// networkErrors returns the error lines about networks in every node's log
// since the marks (prefixed with the node's name), and the plugin's
// warnings (reported, not failed on).
func (c *cluster) networkErrors(m marks) (errs, warns []string) {
	for _, n := range c.nodes {
		chunk := n.logSince(m[n.name])
		for _, l := range strings.Split(chunk, "\n") {
			if p := pluginLine.FindStringSubmatch(l); p != nil {
				switch p[1] {
				case "ERROR":
					errs = append(errs, n.name+": "+l)
				case "WARN":
					warns = append(warns, n.name+": "+l)
				}
				continue
			}
			if !dockerdError.MatchString(l) || !networkWords.MatchString(l) {
				continue
			}
			ignored := false
			for _, ig := range ignoredErrors {
				if m := ig.re.FindStringSubmatch(l); m != nil && (ig.ok == nil || ig.ok(m, chunk)) {
					ignored = true
				}
			}
			if !ignored {
				errs = append(errs, n.name+": "+l)
			}
		}
	}
	return errs, warns
}

// wantNoNetworkErrors fails on every network error line in the nodes' logs
// since the marks and logs the plugin's warnings.
func (c *cluster) wantNoNetworkErrors(t *testing.T, m marks, when string) {
	t.Helper()
	errs, warns := c.networkErrors(m)
	for _, l := range errs {
		t.Errorf("network error in a dockerd log %s: %s", when, l)
	}
	if len(warns) > 0 {
		t.Logf("the plugin's warnings %s (%d):\n%s", when, len(warns), strings.Join(warns, "\n"))
	}
	if len(errs) == 0 {
		t.Logf("no network error in the dockerd logs %s", when)
	}
}
