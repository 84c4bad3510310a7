//go:build vm

package integration

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// vmHostNet is a network with host_address 198.18.x.2 (reserved as
// Docker's aux address) on parent, pool vmPool4(x), with more options.
func vmHostNet(id, parent string, x int, opts ...string) itest.Net {
	n := hostNet(id, parent, x, opts...)
	n.V4 = vmPool4(x)
	return n
}

// vmParentProblem says what is wrong with an owned parent link: it must be
// an up link (a VLAN with id on base, or a dummy when base is "") carrying
// the mark; "" when it is.
func vmParentProblem(ns *itest.Netns, name, base string, id int, mark string) string {
	l := ns.Link(name)
	if l == nil {
		return "link " + name + " is missing"
	}
	if base == "" {
		if _, ok := l.(*netlink.Dummy); !ok {
			return fmt.Sprintf("link %s is a %s link, want dummy", name, l.Type())
		}
	} else if v, ok := l.(*netlink.Vlan); !ok || v.VlanId != id || ns.ParentName(l) != base {
		return fmt.Sprintf("link %s: %s VLAN %v on %s, want VLAN %d on %s", name, l.Type(), vmVLANID(l), ns.ParentName(l), id, base)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		return "link " + name + " is down"
	}
	if a := l.Attrs().Alias; a != mark {
		return fmt.Sprintf("link %s carries alias %q, want the mark %q", name, a, mark)
	}
	return ""
}

// vmWaitParent polls until the owned parent link is as vmParentProblem
// wants, failing after within; it returns how long it took.
func vmWaitParent(t *testing.T, within time.Duration, ns *itest.Netns, name, base string, id int, mark string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		p := vmParentProblem(ns, name, base, id, mark)
		if p == "" {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %s: %s", within, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// vmContainer joins an endpoint and sets its link up in a new namespace
// from the Join answer, as libnetwork does; it returns the namespace.
func vmContainer(t *testing.T, ns *itest.Netns, d *itest.Daemon, net, ep, addr string) *itest.Netns {
	t.Helper()
	j := vmJoin(d, net, ep, addr, "")
	sb := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb, j, addr)
	return sb
}

// Owned parent links are re-made within 3 s when deleted by hand while a
// container uses them: VLAN d0.10 (with a host_address network on it, whose
// host link and route come back on it and carry traffic again), VLAN
// d1.30 (a plain network), and the dummy of an internal network. The
// containers' links die with their parent; Docker then removes their
// endpoints, and new containers work. When the base d0 itself goes, the
// repair waits for it and re-makes d0.10 and the host link once it is back.
func TestVMShimVLANParentRepaired(t *testing.T) {
	// Serial: repairs are bounded (3 s).
	ns, d := vmSetup(t, itest.DaemonOptions{})
	mark := instanceMark(t, d)
	a, b, c := vmNet(1), vmNet(2), vmNet(3)
	shim := shimLink(a)
	const host = "198.18.1.2"
	d.MustCreateNetwork(vmHostNet(a, "d0.10", 1))
	d.MustCreateNetwork(itest.Net{ID: b, Opts: map[string]string{"parent": "d1.30"}, V4: vmPool4(2)})
	d.MustCreateNetwork(itest.Net{ID: c, Internal: true, V4: vmPool4(3)})
	dummy := vmDummy(c)
	for _, p := range []struct {
		name, base string
		id         int
	}{{"d0.10", "d0", 10}, {"d1.30", "d1", 30}, {dummy, "", 0}} {
		if e := vmParentProblem(ns, p.name, p.base, p.id, mark); e != "" {
			t.Fatal(e)
		}
	}
	wantShim(t, ns, shim, "macvlan", "d0.10", mark, host)

	sa := vmContainer(t, ns, d, a, vmEp(1), vmAddr4(1, 10))
	sb := vmContainer(t, ns, d, b, vmEp(2), vmAddr4(2, 10))
	sc := vmContainer(t, ns, d, c, vmEp(3), vmAddr4(3, 10))
	wantShim(t, ns, shim, "macvlan", "d0.10", mark, host, "198.18.1.10")
	wantPings(t, "host and container on VLAN d0.10", ns, host, sa, "198.18.1.10")
	ns.WantLinks(vmWith("d0.10", "d1.30", dummy, shim)...)

	// Each parent deleted by hand while its container uses it.
	for _, p := range []struct {
		name, base string
		id         int
		sb         *itest.Netns
	}{{"d0.10", "d0", 10, sa}, {"d1.30", "d1", 30, sb}, {dummy, "", 0, sc}} {
		old := ns.LinkIndex(p.name)
		ns.Delete(p.name)
		took := vmWaitParent(t, 3*time.Second, ns, p.name, p.base, p.id, mark)
		if ns.LinkIndex(p.name) == old {
			t.Fatalf("%s has its old index %d: it was never deleted?", p.name, old)
		}
		t.Logf("%s re-made %s after its deletion", p.name, took.Round(time.Millisecond))
		if p.sb.Link("eth0") != nil {
			t.Fatalf("the container's link on %s survived its parent's deletion", p.name)
		}
	}
	took := waitShim(t, 3*time.Second, ns, shim, "macvlan", "d0.10", mark, host, "198.18.1.10")
	t.Logf("host link on d0.10 back %s after d0.10 was", took.Round(time.Millisecond))
	ns.WantLinks(vmWith("d0.10", "d1.30", dummy, shim)...)

	// Docker removes the dead containers' endpoints; new containers work.
	for i, n := range []string{a, b, c} {
		d.RemoveEndpoint(n, vmEp(i+1))
	}
	wantShim(t, ns, shim, "macvlan", "d0.10", mark, host)
	sa = vmContainer(t, ns, d, a, vmEp(11), vmAddr4(1, 11))
	wantPings(t, "a new container on the re-made d0.10", ns, host, sa, "198.18.1.11")
	sb1 := vmContainer(t, ns, d, b, vmEp(12), vmAddr4(2, 11))
	sb2 := vmContainer(t, ns, d, b, vmEp(13), vmAddr4(2, 12))
	if err := itest.UDPReach(sb1, "198.18.2.11", sb2, "198.18.2.12", 5*time.Second); err != nil {
		t.Fatalf("two new containers on the re-made d1.30: %v", err)
	}
	vmJoin(d, c, vmEp(14), vmAddr4(3, 11), "")
	vmWantMacvlan(t, ns, vmLink(vmEp(14)), dummy, netlink.MACVLAN_MODE_BRIDGE)

	// The base d0 goes, taking d0.10, the host link and the container's
	// link: nothing can be re-made until d0 is back, then both are, with
	// the route to the (still joined) endpoint.
	ns.Delete("d0")
	time.Sleep(1500 * time.Millisecond)
	ns.WantLinks("lo", "d1", "d1.30", dummy, vmLink(vmEp(14)))
	ns.AddDummy("d0", 1500)
	took = vmWaitParent(t, 3*time.Second, ns, "d0.10", "d0", 10, mark)
	took2 := waitShim(t, 3*time.Second, ns, shim, "macvlan", "d0.10", mark, host, "198.18.1.11")
	t.Logf("d0 back: d0.10 re-made after %s, its host link %s later", took.Round(time.Millisecond), took2.Round(time.Millisecond))
	d.RemoveEndpoint(a, vmEp(11))
	sa = vmContainer(t, ns, d, a, vmEp(15), vmAddr4(1, 12))
	wantPings(t, "a new container after d0 came back", ns, host, sa, "198.18.1.12")

	for _, e := range []struct {
		n  string
		ep int
	}{{a, 15}, {b, 12}, {b, 13}, {c, 14}} {
		d.RemoveEndpoint(e.n, vmEp(e.ep))
	}
	for _, n := range []string{a, b, c} {
		d.DeleteNetwork(n)
	}
	ns.WantLinks(vmBase...)
	time.Sleep(1500 * time.Millisecond) // the watcher saw marked links go: nothing comes back
	ns.WantLinks(vmBase...)
	wantState(t, d, 0)
	ns.WantLinks(vmBase...)
}

// ipvlan networks with host_address on the dummy d0, in every mode with
// the bridge flag: the host link is an ipvlan of the network's mode and
// flag, sharing d0's MAC, and the host and a container ping each other.
// No wire is needed: ipvlan switches between the links of one parent
// itself (by destination address, and ARP to the sibling links in l2),
// exactly as two containers on the dummy reach each other in
// TestVMIpvlanModesAndFlags. The host link comes back within 3 s with its
// route when deleted, and goes with the network.
func TestVMShimIpvlanHostAddress(t *testing.T) {
	// Serial: the live repair is bounded (3 s).
	for _, m := range vmIpvlanModes {
		m := m
		t.Run(m.name, func(t *testing.T) {
			ns, d := vmSetup(t, itest.DaemonOptions{})
			mark := instanceMark(t, d)
			n := vmNet(1)
			shim := shimLink(n)
			const host, ctr = "198.18.1.2", "198.18.1.10"
			d.MustCreateNetwork(vmHostNet(n, "d0", 1, "ipvlan_mode", m.name))
			wantShim(t, ns, shim, "ipvlan", "d0", mark, host)
			vmWantIpvlan(t, ns, shim, "d0", m.mode, netlink.IPVLAN_FLAG_BRIDGE)
			sb := vmContainer(t, ns, d, n, vmEp(1), ctr+"/24")
			wantShim(t, ns, shim, "ipvlan", "d0", mark, host, ctr)
			wantPings(t, "ipvlan "+m.name, ns, host, sb, ctr)

			old := ns.LinkIndex(shim)
			ns.Delete(shim)
			took := waitShim(t, 3*time.Second, ns, shim, "ipvlan", "d0", mark, host, ctr)
			if ns.LinkIndex(shim) == old {
				t.Fatal("the host link has its old index: it was never deleted?")
			}
			vmWantIpvlan(t, ns, shim, "d0", m.mode, netlink.IPVLAN_FLAG_BRIDGE)
			t.Logf("ipvlan %s host link re-made with its route %s after its deletion", m.name, took.Round(time.Millisecond))
			wantPings(t, "ipvlan "+m.name+" after the live repair", ns, host, sb, ctr)

			d.Kill()
			ns.Delete(shim)
			d.Start()
			wantShim(t, ns, shim, "ipvlan", "d0", mark, host, ctr)
			wantPings(t, "ipvlan "+m.name+" after the restart", ns, host, sb, ctr)

			d.DeleteNetwork(n)
			ns.WantLinks(vmBase...)
			wantState(t, d, 0)
		})
	}
}
