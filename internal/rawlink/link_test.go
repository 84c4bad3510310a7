package rawlink

import (
	"bytes"
	"net"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// filters lists the MACs in link's unicast and multicast address filters
// (the bridge fdb dump of a non-bridge link lists them).
func filters(t *testing.T, h *netlink.Handle, link string) []net.HardwareAddr {
	t.Helper()
	l, err := h.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	neighs, err := h.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	var out []net.HardwareAddr
	for _, n := range neighs {
		out = append(out, n.HardwareAddr)
	}
	return out
}

func has(macs []net.HardwareAddr, mac net.HardwareAddr) bool {
	for _, m := range macs {
		if bytes.Equal(m, mac) {
			return true
		}
	}
	return false
}

// TestCloseLaterLeavesBeforeTheClose: CloseLater drops every membership
// the socket holds (those of Listen's config, a MAC joined twice, less one
// left) before the socket's close, which it leaves to run later.
func TestCloseLaterLeavesBeforeTheClose(t *testing.T) {
	itest.RequireRoot(t)
	ns := itest.NewNetns(t)
	ns.AddVeth("rl0", "rl1", 1500)
	h := ns.NL
	mine := net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xfe, 0x01}
	twice := net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xfe, 0x02}
	left := net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xfe, 0x03}
	group := net.HardwareAddr{0x33, 0x33, 0xff, 0x12, 0xfe, 0x01}
	l, err := Listen("rl0", Config{Netns: ns.Handle(), Proto: unix.ETH_P_ALL, Unicast: mine, Groups: []net.HardwareAddr{group}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct {
		join bool
		mac  net.HardwareAddr
	}{{true, twice}, {true, twice}, {true, left}, {false, twice}, {false, left}} {
		f := l.Join
		if !j.join {
			f = l.Leave
		}
		if err := f(Unicast, j.mac); err != nil {
			t.Fatal(err)
		}
	}
	before := filters(t, h, "rl0")
	for _, m := range []net.HardwareAddr{mine, twice, group} {
		if !has(before, m) {
			t.Fatalf("%s is not in rl0's filters %v after the joins", m, before)
		}
	}
	if has(before, left) {
		t.Fatalf("%s is in rl0's filters %v after it was left", left, before)
	}

	var held func()
	l.later = func(shut func()) { held = shut }
	l.CloseLater()
	if held == nil {
		t.Fatal("CloseLater closed nothing")
	}
	after := filters(t, h, "rl0")
	for _, m := range []net.HardwareAddr{mine, twice, group} {
		if has(after, m) {
			t.Errorf("%s is still in rl0's filters %v after CloseLater, the socket still open", m, after)
		}
	}
	held()
	if _, _, err := l.ReadFrom(make([]byte, 64)); err == nil {
		t.Error("the socket reads after its close ran")
	}
}
