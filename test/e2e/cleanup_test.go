//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Paths an engine creates outside its data and exec roots. Those that did
// not exist before the suite are removed after it when empty.
var engineLeftovers = []string{"/run/containerd/s", "/run/containerd", "/run/docker/plugins", "/run/docker", "/etc/docker/key.json", "/etc/docker"}

const createdList = "created-paths" // in dataDir, for a later run after a kill

func (e *env) recordCreated() {
	var absent []string
	for _, p := range engineLeftovers {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, p)
		}
	}
	e.createdNow = absent
	_ = os.MkdirAll(dataDir, 0o700)
	_ = os.WriteFile(filepath.Join(dataDir, createdList), []byte(strings.Join(absent, "\n")), 0o600)
	var shims []string
	ents, _ := os.ReadDir(shimSockets)
	for _, ent := range ents {
		shims = append(shims, ent.Name())
	}
	_ = os.WriteFile(filepath.Join(dataDir, shimList), []byte(strings.Join(shims, "\n")), 0o600)
}

// shimSockets is where containerd's shims put their sockets whatever
// containerd's root; a shim killed with SIGKILL leaves its socket.
const (
	shimSockets = "/run/containerd/s"
	shimList    = "shim-sockets" // in dataDir: the sockets there before the suite
)

// removeDeadShimSockets removes the shim sockets that appeared since the
// suite started and that no process listens on any more.
func removeDeadShimSockets() {
	before := map[string]bool{}
	for _, n := range strings.Fields(readFile(filepath.Join(dataDir, shimList))) {
		before[n] = true
	}
	ents, _ := os.ReadDir(shimSockets)
	for _, ent := range ents {
		p := filepath.Join(shimSockets, ent.Name())
		if before[ent.Name()] || ent.Type()&os.ModeSocket == 0 {
			continue
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			continue
		}
		_ = os.Remove(p)
	}
}

// teardownAll stops and removes everything of the suite: its engine (after
// leaving swarm and removing containers, networks and plugins), every
// process left in its namespace or cgroup, mounts under its directories,
// the namespace and the paths the engine created. With e nil it cleans up
// after an earlier run that was killed.
func teardownAll(e *env) error {
	var errs []error
	// The multi-node harness's engines, namespaces and links first: they
	// hang off the suite's namespace.
	if err := teardownNodes(); err != nil {
		errs = append(errs, err)
	}
	// The DHCP LAN of TestDHCP (dnsmasq, its namespace, its veth).
	if err := teardownDHCPLAN(); err != nil {
		errs = append(errs, err)
	}
	// The IPv6 LAN of TestIPv6LAN (dnsmasq, its namespace, its veth).
	if err := teardownIPv6LAN(); err != nil {
		errs = append(errs, err)
	}
	if e != nil {
		e.stopRegistry()
	}
	if pingDocker() == nil {
		dk := &env{}
		if state, _ := dk.docker("info", "-f", "{{.Swarm.LocalNodeState}}"); state != "inactive" {
			_, _ = dk.docker("swarm", "leave", "--force")
		}
		if ids, _ := dk.docker("ps", "-aq"); ids != "" {
			_, _ = dk.docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		if ids, _ := dk.docker("network", "ls", "-q", "--filter", "type=custom"); ids != "" {
			_, _ = dk.docker(append([]string{"network", "rm"}, strings.Fields(ids)...)...)
		}
		if ids, _ := dk.docker("plugin", "ls", "-q"); ids != "" {
			for _, id := range strings.Fields(ids) {
				if _, err := dk.docker("plugin", "rm", "-f", id); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// The engine: ours by handle, or by pid file after a killed run.
	if e != nil {
		if err := e.stopDockerd(); err != nil {
			errs = append(errs, err)
		}
	}
	if pid := ourDockerdPid(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid, 30*time.Second)
	}
	// Whatever is left in the namespace (containerd, shims, plugins, the
	// registry) or in the cgroup parent (container processes).
	for i := 0; i < 2; i++ {
		pids := ourProcesses()
		if len(pids) == 0 {
			break
		}
		if i == 1 {
			errs = append(errs, fmt.Errorf("processes of the suite still running after SIGKILL: %v", pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitGone(pid, 10*time.Second)
		}
	}
	// The lock files of the legacy daemons' sockets (startLegacy removes
	// each when it stops its daemon; a killed run does not), unless a
	// process of the suite survived: it may hold one.
	if locks, err := filepath.Glob("/run/docker/plugins/underlay-e2e*.sock.lock"); err == nil && len(ourProcesses()) == 0 {
		for _, l := range locks {
			_ = os.Remove(l)
		}
	}
	// Plugin socket directories of plugins that were not removed.
	if ents, err := os.ReadDir(filepath.Join(dataDir, "root", "plugins")); err == nil {
		for _, ent := range ents {
			if len(ent.Name()) == 64 {
				_ = os.RemoveAll(filepath.Join("/run/docker/plugins", ent.Name()))
			}
		}
	}
	if err := unmountUnder(dataDir, runDir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(nsPath); err == nil {
		if out, err := exec.Command("ip", "netns", "del", nsName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", nsName, err, out))
		}
	}
	removeCgroups()
	removeDeadShimSockets()
	created := strings.Fields(readFile(filepath.Join(dataDir, createdList)))
	if e != nil {
		created = e.createdNow
	}
	for _, d := range []string{runDir, dataDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range created {
		_ = os.Remove(p) // only if empty (directories)
	}
	return errors.Join(errs...)
}

// ourDockerdPid is the pid in the suite's pid file if that process is a
// dockerd with the suite's exec root.
func ourDockerdPid() int {
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(pidPath)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !strings.Contains(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), execRoot) {
		return 0
	}
	return pid
}

// ourProcesses lists the processes in the suite's namespace or in its
// cgroup parent.
func ourProcesses() []int { return processesIn(nsPath, cgroupParent) }

// processesIn lists the processes in a namespace (by path) or in a cgroup
// parent.
func processesIn(nsPath, cgroupParent string) []int {
	var nsIno uint64
	var st unix.Stat_t
	if unix.Stat(nsPath, &st) == nil {
		nsIno = st.Ino
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() || isZombie(pid) {
			continue
		}
		ours := false
		if nsIno != 0 {
			var pst unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &pst) == nil && pst.Ino == nsIno {
				ours = true
			}
		}
		if strings.Contains(readFile(fmt.Sprintf("/proc/%d/cgroup", pid)), ":"+cgroupParent+"/") {
			ours = true
		}
		if ours {
			out = append(out, pid)
		}
	}
	return out
}

func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if isZombie(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isZombie reports whether a process has exited and waits to be reaped:
// it holds nothing any more.
func isZombie(pid int) bool {
	s := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(s, ')')
	return i > 0 && strings.HasPrefix(s[i:], ") Z ")
}

// mountsUnder lists this process's mount points at or below the given
// directories.
func mountsUnder(dirs ...string) []string {
	var points []string
	for _, line := range strings.Split(readFile("/proc/self/mountinfo"), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				points = append(points, mp)
			}
		}
	}
	return points
}

// unmountUnder detaches every mount at or below the given directories,
// deepest first.
func unmountUnder(dirs ...string) error {
	points := mountsUnder(dirs...)
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// removeCgroups removes the (empty) cgroup directories of the suite's
// cgroup parent in every hierarchy.
func removeCgroups() { removeCgroupsOf(cgroupParent) }

// removeCgroupsOf removes the (empty) cgroup directories of a cgroup
// parent in every hierarchy.
func removeCgroupsOf(cgroupParent string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupParent)
	if fi, err := os.Stat("/sys/fs/cgroup" + cgroupParent); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup"+cgroupParent)
	}
	for _, r := range roots {
		var dirs []string
		_ = filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
