package itest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netns is a fresh network namespace owned by a test, with a netlink
// handle into it. It is destroyed, with every link in it, at cleanup.
type Netns struct {
	t      testing.TB
	handle netns.NsHandle
	// NL is a netlink handle (NETLINK_ROUTE only) into the namespace.
	NL *netlink.Handle
}

// NewNetns creates a namespace with lo up.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	ns, _ := NewDisposableNetns(t)
	return ns
}

func newNS() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	h, err := netns.New()
	if err != nil {
		return 0, err
	}
	if err := netns.Set(orig); err != nil {
		// This thread is stuck in the new namespace; never reuse it.
		runtime.LockOSThread()
		return 0, err
	}
	return h, nil
}

// File returns a new descriptor of the namespace (for ExtraFiles); the
// caller closes it.
func (n *Netns) File() *os.File {
	fd, err := unix.Dup(int(n.handle))
	if err != nil {
		n.t.Fatalf("dup netns fd: %v", err)
	}
	return os.NewFile(uintptr(fd), "netns")
}

// Handle returns the namespace handle.
func (n *Netns) Handle() netns.NsHandle { return n.handle }

// AddVeth creates an up veth pair in the namespace; name is the parent
// the tests use.
func (n *Netns) AddVeth(name, peer string, mtu int) {
	n.t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, PeerName: peer}
	if err := n.NL.LinkAdd(v); err != nil {
		n.t.Fatalf("add veth %s: %v", name, err)
	}
	n.Up(name)
	n.Up(peer)
}

// AddDummy creates an up dummy link (a kernel with dummy only).
func (n *Netns) AddDummy(name string, mtu int) {
	n.t.Helper()
	if err := n.NL.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}); err != nil {
		n.t.Fatalf("add dummy %s: %v", name, err)
	}
	n.Up(name)
}

// AddVLAN creates an up VLAN link (a kernel with 8021q only).
func (n *Netns) AddVLAN(name, base string, id int) {
	n.t.Helper()
	b := n.MustLink(base)
	if err := n.NL.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: b.Attrs().Index}, VlanId: id}); err != nil {
		n.t.Fatalf("add vlan %s: %v", name, err)
	}
	n.Up(name)
}

// Up sets a link up.
func (n *Netns) Up(name string) {
	n.t.Helper()
	if err := n.NL.LinkSetUp(n.MustLink(name)); err != nil {
		n.t.Fatalf("set %s up: %v", name, err)
	}
}

// Delete deletes a link behind the daemon's back.
func (n *Netns) Delete(name string) {
	n.t.Helper()
	if err := n.NL.LinkDel(n.MustLink(name)); err != nil {
		n.t.Fatalf("delete %s: %v", name, err)
	}
}

// Link returns the named link, or nil.
func (n *Netns) Link(name string) netlink.Link {
	l, err := n.NL.LinkByName(name)
	if err != nil {
		return nil
	}
	return l
}

// MustLink returns the named link or fails the test.
func (n *Netns) MustLink(name string) netlink.Link {
	n.t.Helper()
	l, err := n.NL.LinkByName(name)
	if err != nil {
		n.t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// LinkNames returns the names of all links in the namespace, sorted.
func (n *Netns) LinkNames() []string {
	n.t.Helper()
	ls, err := n.NL.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		n.t.Fatalf("list links: %v", err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Attrs().Name)
	}
	sort.Strings(out)
	return out
}

// ParentName returns the name of a link's lower link.
func (n *Netns) ParentName(l netlink.Link) string {
	p, err := n.NL.LinkByIndex(l.Attrs().ParentIndex)
	if err != nil {
		return fmt.Sprintf("index %d", l.Attrs().ParentIndex)
	}
	return p.Attrs().Name
}

// WantLinks fails unless the namespace holds exactly the named links.
func (n *Netns) WantLinks(want ...string) {
	n.t.Helper()
	sort.Strings(want)
	got := n.LinkNames()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		n.t.Fatalf("links in the namespace: %v, want %v", got, want)
	}
}

// Path is a path that opens the namespace from any process of this host's
// mount namespace while the test runs (its descriptor in /proc): what a
// Join's SandboxKey names.
func (n *Netns) Path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(n.handle)) }

// Replace makes the namespace's Path open other instead (another
// container's namespace taking the path).
func (n *Netns) Replace(other *Netns) {
	n.t.Helper()
	if err := unix.Dup3(int(other.handle), int(n.handle), unix.O_CLOEXEC); err != nil {
		n.t.Fatalf("replace the namespace at %s: %v", n.Path(), err)
	}
}
