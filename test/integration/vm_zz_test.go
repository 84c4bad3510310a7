//go:build vm

package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Runs last (files and tests run in name order unless -shuffle): after the
// whole suite, no underlay process is left in the VM and the VM's own
// namespace holds only lo; every test checked its own namespace's links
// before its namespace was destroyed.
func TestVMZZNothingLeftInTheVM(t *testing.T) {
	if !itest.InVM() {
		t.Skip("skipped: checks the test VM after the suite; runs under `make test-vm`")
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ls, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name)
	}
	if len(names) != 1 || names[0] != "lo" {
		t.Errorf("links in the VM's namespace after the suite: %v, want [lo]", names)
	}
	bin := itest.Binary(t)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if argv0, _, _ := bytes.Cut(raw, []byte{0}); string(argv0) == bin {
			t.Errorf("underlay still running after the suite: %s: %q", p, bytes.ReplaceAll(raw, []byte{0}, []byte{' '}))
		}
	}
	t.Logf("VM namespace links %v, no underlay process left", names)
}
