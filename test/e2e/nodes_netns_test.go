//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The multi-node harness's wiring. A small namespace of the harness's own
// (lanNS) holds two bridges: ctlBridge for swarm's control plane and
// lanBridge, the shared L2 segment of the data plane. Every node has a
// veth into each: ctlLink with its swarm address in 198.18.254.0/24, and
// its LAN link (lana, lanb, lanc: another name on every node) with an
// address in 198.18.41.0/24, so the node has the connected route
// 198.18.41.0/24 on it. Nothing is created in the host's namespace: every
// veth is made in lanNS with its peer placed in the node's namespace.
const (
	lanNS     = nsName + "-lan"
	ctlBridge = "brctl"
	lanBridge = "brlan"
	ctlLink   = "ctlm"
	lanPrefix = "198.18.41.0/24"
)

// ipCmds runs ip with each argument list in turn.
func ipCmds(cmds ...[]string) error {
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// makeLAN creates the LAN namespace with its two bridges.
func makeLAN() error {
	cmds := [][]string{{"netns", "add", lanNS}, {"-n", lanNS, "link", "set", "lo", "up"}}
	for _, br := range []string{ctlBridge, lanBridge} {
		cmds = append(cmds,
			[]string{"-n", lanNS, "link", "add", br, "mtu", "1500", "type", "bridge"},
			[]string{"-n", lanNS, "link", "set", br, "up"})
	}
	return ipCmds(cmds...)
}

// wire creates the node's namespace (for nodes 2 and 3; node 1's is the
// suite's) and its control and LAN links into the LAN namespace.
func (n *node) wire() error {
	var cmds [][]string
	if !n.suite() {
		cmds = append(cmds, []string{"netns", "add", n.ns}, []string{"-n", n.ns, "link", "set", "lo", "up"})
	}
	for _, l := range []struct{ peer, link, bridge, addr string }{
		{"c" + n.name, ctlLink, ctlBridge, n.ctlIP + "/24"},
		{"l" + n.name, n.lan, lanBridge, n.lanIP + "/24"},
	} {
		cmds = append(cmds,
			[]string{"-n", lanNS, "link", "add", l.peer, "mtu", "1500", "type", "veth", "peer", "name", l.link, "netns", n.ns},
			[]string{"-n", lanNS, "link", "set", l.peer, "master", l.bridge},
			[]string{"-n", lanNS, "link", "set", l.peer, "up"},
			[]string{"-n", n.ns, "link", "set", l.link, "mtu", "1500"},
			[]string{"-n", n.ns, "addr", "add", l.addr, "dev", l.link},
			[]string{"-n", n.ns, "link", "set", l.link, "up"})
	}
	return ipCmds(cmds...)
}

// nsLinkList lists the links of a named namespace with a
// NETLINK_ROUTE-only handle.
func nsLinkList(ns string) ([]netlink.Link, error) { return linksAt("/run/netns/" + ns) }

// linksAt lists the links of the namespace a file opens.
func linksAt(path string) ([]netlink.Link, error) {
	nsh, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", path, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var links []netlink.Link
	for i := 0; i < 5; i++ {
		if links, err = h.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return links, err
}

// addrsAt lists the IPv4 addresses in the namespace a file opens, each
// with its interface's name.
func addrsAt(path string) (map[string]string, error) {
	nsh, err := netns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range addrs {
		out[a.IP.String()] = a.Label
	}
	return out, nil
}

// nsIfindex is the index of a link in a named namespace, by netlink.
func nsIfindex(ns, name string) (int, error) {
	links, err := nsLinkList(ns)
	if err != nil {
		return 0, err
	}
	for _, l := range links {
		if l.Attrs().Name == name {
			return l.Attrs().Index, nil
		}
	}
	return 0, fmt.Errorf("no link %s in namespace %s", name, ns)
}

// pluginLinks lists the links in a namespace the plugin made: endpoint
// (ule…) and host (ulh…) links, and any link whose alias the plugin set
// ("underlay:…", parents it created).
func pluginLinks(ns string) ([]string, error) {
	links, err := nsLinkList(ns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Name, "ule") || strings.HasPrefix(a.Name, "ulh") || strings.HasPrefix(a.Alias, "underlay:") {
			out = append(out, fmt.Sprintf("%s (alias %q)", a.Name, a.Alias))
		}
	}
	sort.Strings(out)
	return out, nil
}
