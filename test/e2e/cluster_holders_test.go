//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// Addresses as the machine has them, not only as the running tasks do: a
// network namespace of an earlier sandbox kept alive (by a mount of its
// namespace file somewhere) keeps its interface on the LAN with its
// address. The one such case the checks accept is the documented known
// defect: after a dockerd crash, namespaces held only by that node's
// plugin (its private copy of /run from the moment it restarted), which
// the test reports.

// heldNS is a network namespace on the machine and what keeps it alive.
type heldNS struct {
	ino   uint64
	path  string
	holds []nsHold
}

func (h heldNS) String() string {
	var s []string
	for _, x := range h.holds {
		s = append(s, x.String())
	}
	sort.Strings(s)
	return fmt.Sprintf("net:[%d] held by %s", h.ino, strings.Join(s, "; "))
}

// foreignNS lists the network namespaces on the machine other than the
// nodes' and the LAN's own.
func (c *cluster) foreignNS(t *testing.T) []heldNS {
	t.Helper()
	skip := map[uint64]bool{}
	for _, ns := range append([]string{lanNS}, c.nsNames()...) {
		ino, err := nsInode("/run/netns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		skip[ino] = true
	}
	paths, holds, err := machineNetns()
	if err != nil {
		t.Fatal(err)
	}
	var out []heldNS
	for ino, p := range paths {
		if !skip[ino] {
			out = append(out, heldNS{ino: ino, path: p, holds: holds[ino]})
		}
	}
	return out
}

func (c *cluster) nsNames() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.ns)
	}
	return out
}

// checkHolders fails unless every address of the tasks' networks on the
// machine is carried by one namespace, a running task's. Namespaces that
// carry an address no task has fail the test too: after a node's dockerd
// crash they were old sandboxes a restarted plugin's copy of /run kept
// alive, before the plugin mounted /run without the mounts below it.
func (c *cluster) checkHolders(t *testing.T, tasks []task) {
	t.Helper()
	own := map[string]task{}
	var prefixes []string
	for _, k := range tasks {
		own[k.addr] = k
		prefixes = append(prefixes, k.service.prefix)
	}
	carriers := map[string][]string{}
	for _, h := range c.foreignNS(t) {
		addrs, err := addrsAt(h.path)
		if err != nil {
			continue // a namespace whose last process has just exited
		}
		for a, dev := range addrs {
			if !hasAnyPrefix(a, prefixes) {
				continue
			}
			where := fmt.Sprintf("%s on %s in %s", a, dev, h)
			carriers[a] = append(carriers[a], where)
			if _, ok := own[a]; ok {
				continue
			}
			t.Errorf("%s, an address no running task has", where)
		}
	}
	for a, where := range carriers {
		if k, ok := own[a]; ok && len(where) > 1 {
			t.Errorf("%s's address is on the LAN more than once: %s", k, strings.Join(where, " | "))
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
