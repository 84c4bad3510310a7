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
// address. The one such case the checks accept is the README's known
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

// knownLinger reports whether only the plugin of a node whose dockerd was
// killed holds the namespace: the README's known defect.
func (c *cluster) knownLinger(h heldNS) bool {
	pids := map[int]bool{}
	for _, n := range c.nodes {
		if c.crashed[n.name] {
			for _, p := range n.pluginPids() {
				pids[p] = true
			}
		}
	}
	for _, x := range h.holds {
		if !x.plugin() || !pids[x.pid] {
			return false
		}
	}
	return len(h.holds) > 0
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
// carry an address no task has fail the test too, unless they are the
// known defect, which is reported.
func (c *cluster) checkHolders(t *testing.T, tasks []task) {
	t.Helper()
	own := map[string]task{}
	var prefixes []string
	for _, k := range tasks {
		own[k.addr] = k
		prefixes = append(prefixes, k.service.prefix)
	}
	carriers := map[string][]string{}
	var known []string
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
			if c.knownLinger(h) {
				known = append(known, where)
			} else {
				t.Errorf("%s, an address no running task has", where)
			}
		}
	}
	for a, where := range carriers {
		if k, ok := own[a]; ok && len(where) > 1 {
			t.Errorf("%s's address is on the LAN more than once: %s", k, strings.Join(where, " | "))
		}
	}
	if len(known) > 0 {
		sort.Strings(known)
		t.Logf("known defect (README, Known limitations): %d namespaces of sandboxes from before the dockerd crash, held only by the restarted plugin's copy of /run, keep their addresses on the LAN:\n%s",
			len(known), strings.Join(known, "\n"))
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

// leftovers splits links a node has beyond its links after setup into
// those that are the peer of a veth in a namespace that is the known
// defect (a sandbox held only by a crashed node's plugin) and the others.
func (c *cluster) leftovers(t *testing.T, n *node, extra []string) (known, other []string) {
	t.Helper()
	links, err := nsLinkList(n.ns)
	if err != nil {
		t.Fatal(err)
	}
	type peer struct{ index, parent int }
	held := map[peer]heldNS{}
	for _, h := range c.foreignNS(t) {
		if !c.knownLinger(h) {
			continue
		}
		ls, err := linksAt(h.path)
		if err != nil {
			continue
		}
		for _, l := range ls {
			if l.Type() == "veth" {
				held[peer{l.Attrs().Index, l.Attrs().ParentIndex}] = h
			}
		}
	}
	for _, name := range extra {
		var desc string
		for _, l := range links {
			if a := l.Attrs(); a.Name == name && l.Type() == "veth" {
				if h, ok := held[peer{a.ParentIndex, a.Index}]; ok {
					desc = fmt.Sprintf("%s (veth, its peer in %s)", name, h)
				}
			}
		}
		if desc != "" {
			known = append(known, desc)
		} else {
			other = append(other, name)
		}
	}
	return known, other
}
