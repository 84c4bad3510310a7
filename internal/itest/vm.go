package itest

// Helpers of the VM suite (test/integration/vm_*_test.go): what libnetwork
// does with a Join answer inside a container's namespace, and traffic
// between two such namespaces.

import (
	"fmt"
	"github.com/underlay-net/underlay/internal/netnsrun"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RequireKernelLinks skips the test when the kernel cannot create the link
// kinds the VM suite needs (dummy, vlan, ipvlan), except inside the test VM
// and in CI, where it fails: there a missing kind is a broken setup.
func RequireKernelLinks(t testing.TB, ns *Netns) {
	t.Helper()
	probe := func() error {
		if err := ns.NL.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}}); err != nil {
			return fmt.Errorf("dummy: %w", err)
		}
		defer func() { _ = ns.NL.LinkDel(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}}) }()
		p := ns.MustLink("probe0").Attrs().Index
		if err := ns.NL.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe0.2", ParentIndex: p}, VlanId: 2}); err != nil {
			return fmt.Errorf("vlan: %w", err)
		}
		if err := ns.NL.LinkAdd(&netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "probe1", ParentIndex: p}}); err != nil {
			return fmt.Errorf("ipvlan: %w", err)
		}
		return nil
	}
	err := probe()
	if err == nil {
		return
	}
	if InVM() || InCI() {
		t.Fatalf("this kernel cannot create the links the VM suite needs (%v): it needs dummy, 8021q and ipvlan", err)
	}
	t.Skipf("skipped: this kernel cannot create the links the VM suite needs (%v); run it with `sudo make test-vm`", err)
}

// Do runs fn on an OS thread that has joined the namespace; sockets fn
// opens stay in the namespace.
func (n *Netns) Do(fn func() error) error { return netnsrun.Do(n.handle, "the test's", fn) }

// MoveLink moves the link name into the namespace to, renamed newName
// there, and returns it as to sees it.
func (n *Netns) MoveLink(name string, to *Netns, newName string) netlink.Link {
	n.t.Helper()
	if err := n.NL.LinkSetNsFd(n.MustLink(name), int(to.handle)); err != nil {
		n.t.Fatalf("move %s to another namespace: %v", name, err)
	}
	l := to.MustLink(name)
	if newName != name {
		if err := to.NL.LinkSetName(l, newName); err != nil {
			n.t.Fatalf("rename %s to %s: %v", name, newName, err)
		}
	}
	return to.MustLink(newName)
}

// JoinSandbox does what libnetwork does with a Join answer: it moves the
// link SrcName from host into the sandbox namespace sb, names it
// DstPrefix+"0", adds the addresses (CIDR form, IPv6 without duplicate
// address detection), sets it up and adds the gateway routes, or the
// static routes (RouteType 1 connected, 0 via NextHop). It returns the
// link's name in sb.
func JoinSandbox(host, sb *Netns, j network.JoinResponse, addrs ...string) string {
	host.t.Helper()
	t := host.t
	name := j.InterfaceName.DstPrefix + "0"
	l := host.MoveLink(j.InterfaceName.SrcName, sb, name)
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ad, err := netlink.ParseAddr(a)
		if err != nil {
			t.Fatalf("address %q: %v", a, err)
		}
		if ad.IP.To4() == nil {
			ad.Flags = unix.IFA_F_NODAD
		}
		if err := sb.NL.AddrAdd(l, ad); err != nil {
			t.Fatalf("add %s to %s in the sandbox: %v", a, name, err)
		}
	}
	if err := sb.NL.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up in the sandbox: %v", name, err)
	}
	idx := l.Attrs().Index
	for _, gw := range []string{j.Gateway, j.GatewayIPv6} {
		if gw == "" {
			continue
		}
		ip := net.ParseIP(gw)
		if ip == nil {
			t.Fatalf("Join answered gateway %q, which is not an address", gw)
		}
		if err := sb.NL.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: ip}); err != nil {
			t.Fatalf("default route via %s in the sandbox: %v", gw, err)
		}
	}
	for _, r := range j.StaticRoutes {
		_, dst, err := net.ParseCIDR(r.Destination)
		if err != nil {
			t.Fatalf("Join answered static route %+v: %v", r, err)
		}
		route := &netlink.Route{LinkIndex: idx, Dst: dst}
		switch r.RouteType {
		case 1:
			route.Scope = netlink.SCOPE_LINK
		case 0:
			route.Gw = net.ParseIP(r.NextHop)
		default:
			t.Fatalf("Join answered static route %+v with unknown RouteType", r)
		}
		if err := sb.NL.RouteAdd(route); err != nil {
			t.Fatalf("static route %+v in the sandbox: %v", r, err)
		}
	}
	return name
}

// LeaveSandbox does what libnetwork does on leave: in sb it sets the link
// down, renames it back to srcName and moves it to the host namespace.
func LeaveSandbox(host, sb *Netns, name, srcName string) {
	host.t.Helper()
	t := host.t
	l := sb.MustLink(name)
	if err := sb.NL.LinkSetDown(l); err != nil {
		t.Fatalf("set %s down in the sandbox: %v", name, err)
	}
	if err := sb.NL.LinkSetName(l, srcName); err != nil {
		t.Fatalf("rename %s back to %s: %v", name, srcName, err)
	}
	if err := sb.NL.LinkSetNsFd(sb.MustLink(srcName), int(host.handle)); err != nil {
		t.Fatalf("move %s back to the host namespace: %v", srcName, err)
	}
	host.MustLink(srcName)
}

// UDPReach sends datagrams from the address from (in namespace fromNS) to
// the address to (in toNS) until one arrives or timeout passes; it returns
// nil once one arrived.
func UDPReach(fromNS *Netns, from string, toNS *Netns, to string, timeout time.Duration) error {
	src, dst := netip.MustParseAddr(from), netip.MustParseAddr(to)
	var rx, tx net.PacketConn
	if err := toNS.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 0)))
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s: %w", to, err)
	}
	defer rx.Close()
	if err := fromNS.Do(func() (err error) {
		tx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
		return err
	}); err != nil {
		return fmt.Errorf("bind %s: %w", from, err)
	}
	defer tx.Close()
	msg := []byte("underlay " + from + " -> " + to)
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 256)
	var lastErr error
	for time.Now().Before(deadline) {
		if _, err := tx.WriteTo(msg, rx.LocalAddr()); err != nil {
			lastErr = err
		}
		_ = rx.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		for {
			k, _, err := rx.ReadFrom(buf)
			if err != nil {
				break
			}
			if strings.HasPrefix(string(buf[:k]), string(msg)) {
				return nil
			}
		}
	}
	if lastErr != nil {
		return fmt.Errorf("nothing from %s reached %s within %s (last send error: %w)", from, to, timeout, lastErr)
	}
	return fmt.Errorf("nothing from %s reached %s within %s", from, to, timeout)
}

// NewDisposableNetns is NewNetns for a namespace the test may destroy
// early, as when a container dies: destroy closes the namespace's handles
// and the kernel then tears it down with the links in it. Do not use the
// Netns after destroy.
func NewDisposableNetns(t testing.TB) (ns *Netns, destroy func()) {
	t.Helper()
	RequireRoot(t)
	h, err := newNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		t.Fatalf("netlink handle in namespace: %v", err)
	}
	var once sync.Once
	destroy = func() { once.Do(func() { nl.Close(); h.Close() }) }
	t.Cleanup(destroy)
	ns = &Netns{t: t, handle: h, NL: nl}
	if lo, err := nl.LinkByName("lo"); err == nil {
		_ = nl.LinkSetUp(lo)
	}
	return ns, destroy
}

// LinkIndex returns the index of the named link, or 0 when there is none.
func (n *Netns) LinkIndex(name string) int {
	if l := n.Link(name); l != nil {
		return l.Attrs().Index
	}
	return 0
}
