//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// nsInode is the inode of a namespace file (the namespace's identity).
func nsInode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no inode", path)
	}
	return st.Ino, nil
}

// nsHold is one thing that keeps a network namespace alive: a process in
// it, or a mount of its namespace file (nsfs) in some mount namespace.
type nsHold struct {
	pid   int
	cmd   string // the process's command line, at most 60 bytes
	mount string // the mount point, for a mount; "" for a process
}

func (h nsHold) String() string {
	if h.mount == "" {
		return fmt.Sprintf("process %d (%s)", h.pid, h.cmd)
	}
	return fmt.Sprintf("mount %s in the mount namespace of process %d (%s)", h.mount, h.pid, h.cmd)
}

// plugin reports whether the hold is a mount in a plugin's mount
// namespace (/underlay serve).
func (h nsHold) plugin() bool {
	return h.mount != "" && strings.HasPrefix(h.cmd, "/underlay serve")
}

// machineNetns finds every network namespace on the machine: those of
// processes, and those held only by a mount of the namespace file in some
// mount namespace, such as a plugin's. It maps each namespace's inode to a
// path that opens it and to what holds it. It only reads.
func machineNetns() (map[uint64]string, map[uint64][]nsHold, error) {
	paths := map[uint64]string{}
	holds := map[uint64][]nsHold{}
	add := func(path string, h nsHold) {
		ino, err := nsInode(path)
		if err != nil {
			return
		}
		if _, ok := paths[ino]; !ok {
			paths[ino] = path
		}
		holds[ino] = append(holds[ino], h)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil, err
	}
	mntSeen := map[uint64]bool{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(readFile(fmt.Sprintf("/proc/%d/cmdline", pid)), "\x00", " "))
		if len(cmd) > 60 {
			cmd = cmd[:60]
		}
		add(fmt.Sprintf("/proc/%d/ns/net", pid), nsHold{pid: pid, cmd: cmd})
		mnt, err := nsInode(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil || mntSeen[mnt] {
			continue
		}
		mntSeen[mnt] = true
		f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE OPTS
			fields := strings.Fields(sc.Text())
			sep := -1
			for i, fl := range fields {
				if fl == "-" {
					sep = i
					break
				}
			}
			if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "nsfs" || strings.Contains(fields[4], "\\") {
				continue
			}
			add(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), fields[4]), nsHold{pid: pid, cmd: cmd, mount: fields[4]})
		}
		f.Close()
	}
	return paths, holds, nil
}
