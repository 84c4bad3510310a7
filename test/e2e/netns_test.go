//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// makeNetns creates the namespace with lo, the veth parents and ctl0 (the
// swarm advertise address).
func (e *env) makeNetns() error {
	cmds := [][]string{{"netns", "add", nsName}, {"-n", nsName, "link", "set", "lo", "up"}}
	for _, p := range append(append([]string{}, parents...), "ctl0") {
		cmds = append(cmds,
			[]string{"-n", nsName, "link", "add", p, "mtu", "1500", "type", "veth", "peer", "name", p + "-p"},
			[]string{"-n", nsName, "link", "set", p, "up"},
			[]string{"-n", nsName, "link", "set", p + "-p", "up"})
	}
	cmds = append(cmds, []string{"-n", nsName, "addr", "add", ctlAddr + "/24", "dev", "ctl0"})
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// checkHostUntouched compares the host after cleanup with the host before
// the suite.
func (e *env) checkHostUntouched() error {
	var errs []error
	now, err := linkNames("")
	if err != nil {
		return err
	}
	if fmt.Sprint(now) != fmt.Sprint(e.hostLinks) {
		errs = append(errs, fmt.Errorf("host links %v, before the suite %v", now, e.hostLinks))
	}
	if pids := ourProcesses(); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes left: %v", pids))
	}
	if _, err := os.Stat(nsPath); err == nil {
		errs = append(errs, fmt.Errorf("namespace %s left", nsName))
	}
	errs = append(errs, nodesLeft())
	errs = append(errs, dhcpLANLeft())
	errs = append(errs, ipv6LANLeft())
	if m := strings.Count(readFile("/proc/self/mountinfo"), " "+runDir) + strings.Count(readFile("/proc/self/mountinfo"), " "+dataDir); m > 0 {
		errs = append(errs, fmt.Errorf("%d mounts left under %s or %s", m, runDir, dataDir))
	}
	for _, p := range append([]string{runDir, dataDir}, e.createdNow...) {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, fmt.Errorf("%s left", p))
		}
	}
	return errors.Join(errs...)
}

// linkNames lists the links of a named namespace ("" for the host's) with
// a NETLINK_ROUTE-only handle.
func linkNames(ns string) ([]string, error) {
	var h *netlink.Handle
	var err error
	if ns == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var nsh netns.NsHandle
		if nsh, err = netns.GetFromName(ns); err != nil {
			return nil, fmt.Errorf("open namespace %s: %w", ns, err)
		}
		defer nsh.Close()
		h, err = netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	}
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
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	sort.Strings(names)
	return names, nil
}
