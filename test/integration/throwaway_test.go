package integration

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The LAN preflight's throwaway child: a marked macvlan of the parent,
// up, with its MAC, in an anonymous namespace of its own where IPv6 is
// off; the parent's namespace never sees it, and Close removes it.
func TestThrowawayChild(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("tw0", "tw0-peer", 1500)
	ns.Up("tw0")
	k := newKernel(t, ns)
	before := ns.LinkNames()
	mac := net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0x77, 0x01}
	mark := kernel.Mark("test-throwaway")
	tw, err := k.AddThrowaway(context.Background(), "tw0", mac, mark)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := netns.GetFromPath("/proc/self/fd/" + strconv.Itoa(int(tw.Netns))) // a handle of the test's own
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	h, err := netlink.NewHandleAt(keep, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(netlinkutil.ThrowawayName)
	if err != nil {
		t.Fatalf("no child in its namespace: %v", err)
	}
	a := l.Attrs()
	if l.Type() != "macvlan" || a.Alias != mark || a.HardwareAddr.String() != mac.String() || a.Flags&net.FlagUp == 0 {
		t.Fatalf("child %s: type %s alias %q MAC %s flags %v", a.Name, l.Type(), a.Alias, a.HardwareAddr, a.Flags)
	}
	var v6 []byte
	if err := netnsrun.Do(keep, "the child's", func() (err error) {
		v6, err = os.ReadFile("/proc/sys/net/ipv6/conf/" + netlinkutil.ThrowawayName + "/disable_ipv6")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(v6)) != "1" {
		t.Fatalf("the child's disable_ipv6 is %q: the kernel would send DAD and router solicitations from it", v6)
	}
	if got := ns.LinkNames(); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("the parent's namespace changed: %v, was %v", got, before)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := h.LinkByName(netlinkutil.ThrowawayName); err == nil {
		t.Fatalf("child %s left after Close", l.Attrs().Name)
	}
}
