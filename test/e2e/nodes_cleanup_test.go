//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processesOf lists the processes in the node's namespace or cgroup
// parent.
func processesOf(n *node) []int { return processesIn(n.nsPath(), n.cgroup) }

// teardownNodes stops and removes the extra nodes (the given ones, which
// this process started, or by their fixed names after a killed run): their
// engines (after leaving swarm and removing containers and plugins),
// every process left in their namespaces or cgroups, mounts under their
// directories, the namespaces and directories; then the harness's links
// in the suite's namespace and the LAN namespace.
func teardownNodes(nodes ...*node) error {
	if len(nodes) == 0 {
		for i := 2; i <= 1+extraNodes; i++ {
			nodes = append(nodes, extraNode(i))
		}
	}
	var errs []error
	for _, n := range nodes {
		if err := n.teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(suiteNode().nsPath()); err == nil {
		for _, l := range []string{ctlLink, suiteNode().lan} {
			if _, err := exec.Command("ip", "-n", nsName, "link", "show", l).CombinedOutput(); err == nil {
				if out, err := exec.Command("ip", "-n", nsName, "link", "del", l).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("ip -n %s link del %s: %v: %s", nsName, l, err, out))
				}
			}
		}
	}
	if err := delNetns(lanNS); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// teardown stops and removes one extra node.
func (n *node) teardown() error {
	var errs []error
	if n.ping() == nil {
		if state, _ := n.docker("info", "-f", "{{.Swarm.LocalNodeState}}"); state != "inactive" {
			_, _ = n.docker("swarm", "leave", "--force")
		}
		if ids, _ := n.docker("ps", "-aq"); ids != "" {
			_, _ = n.docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		if ids, _ := n.docker("plugin", "ls", "-q"); ids != "" {
			for _, id := range strings.Fields(ids) {
				if _, err := n.docker("plugin", "rm", "-f", id); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := n.stop(); err != nil {
		errs = append(errs, err)
	}
	if pid := n.dockerdPid(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid, 30*time.Second)
	}
	for i := 0; i < 2; i++ {
		pids := processesOf(n)
		if len(pids) == 0 {
			break
		}
		if i == 1 {
			errs = append(errs, fmt.Errorf("%s: processes still running after SIGKILL: %v", n.name, pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitGone(pid, 10*time.Second)
		}
	}
	// Plugin socket directories (shared /run/docker/plugins) of plugins
	// that were not removed.
	if ents, err := os.ReadDir(filepath.Join(n.dataRoot(), "plugins")); err == nil {
		for _, ent := range ents {
			if len(ent.Name()) == 64 {
				_ = os.RemoveAll(filepath.Join("/run/docker/plugins", ent.Name()))
			}
		}
	}
	if err := unmountUnder(n.dir, n.run); err != nil {
		errs = append(errs, err)
	}
	if err := delNetns(n.ns); err != nil {
		errs = append(errs, err)
	}
	removeCgroupsOf(n.cgroup)
	for _, d := range []string{n.run, n.dir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dockerdPid is the pid in the node's pid file if that process is a
// dockerd with the node's exec root.
func (n *node) dockerdPid() int {
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(n.pidFile())))
	if err != nil || pid <= 0 {
		return 0
	}
	if !strings.Contains(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), n.execRoot()+"\x00") {
		return 0
	}
	return pid
}

func delNetns(name string) error {
	if _, err := os.Stat("/run/netns/" + name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", name, err, out)
	}
	return nil
}

// nodesLeft reports what is left of the extra nodes and the LAN after
// cleanup.
func nodesLeft() error {
	var errs []error
	for i := 2; i <= 1+extraNodes; i++ {
		n := extraNode(i)
		if pids := processesOf(n); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("%s: processes left: %v", n.name, pids))
		}
		for _, p := range []string{n.nsPath(), n.run, n.dir} {
			if _, err := os.Lstat(p); err == nil {
				errs = append(errs, fmt.Errorf("%s left", p))
			}
		}
		if m, _ := filepath.Glob("/sys/fs/cgroup/*" + n.cgroup); len(m) > 0 {
			errs = append(errs, fmt.Errorf("cgroups left: %v", m))
		}
	}
	if _, err := os.Lstat("/run/netns/" + lanNS); err == nil {
		errs = append(errs, fmt.Errorf("namespace %s left", lanNS))
	}
	return errors.Join(errs...)
}

// keepNodeLogs copies the extra nodes' logs out of their data dirs before
// cleanup removes them, for a failed run.
func keepNodeLogs() {
	for i := 2; i <= 1+extraNodes; i++ {
		n := extraNode(i)
		dst := filepath.Join(os.TempDir(), "underlay-e2e-"+n.name+"-dockerd.log")
		if b, err := os.ReadFile(n.logPath()); err == nil && os.WriteFile(dst, b, 0o644) == nil {
			fmt.Fprintf(os.Stderr, "e2e: %s's dockerd log is kept in %s\n", n.name, dst)
		}
	}
}
