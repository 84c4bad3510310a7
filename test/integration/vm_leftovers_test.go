//go:build vm

package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nothingLeftInTheVM runs after the whole suite (TestMain, main_test.go):
// no underlay process is left in the VM and the VM's own namespace holds
// only lo; every test checked its own namespace's links before its
// namespace was destroyed. Outside the VM it checks nothing.
func nothingLeftInTheVM() error {
	if !itest.InVM() {
		return nil
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("nothing left in the VM: %w", err)
	}
	defer h.Close()
	ls, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("nothing left in the VM: %w", err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name)
	}
	var problems []string
	if len(names) != 1 || names[0] != "lo" {
		problems = append(problems, fmt.Sprintf("links in the VM's namespace after the suite: %v, want [lo]", names))
	}
	if bin := os.Getenv("UNDERLAY_BIN"); bin != "" {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			raw, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if argv0, _, _ := bytes.Cut(raw, []byte{0}); string(argv0) == bin {
				problems = append(problems, fmt.Sprintf("underlay still running after the suite: %s: %q", p, bytes.ReplaceAll(raw, []byte{0}, []byte{' '})))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("nothing left in the VM: %v", problems)
	}
	fmt.Printf("after the suite: VM namespace links %v, no underlay process left\n", names)
	return nil
}
