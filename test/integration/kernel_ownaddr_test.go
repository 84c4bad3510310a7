package integration

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netlinkutil's OwnAddr finds the host's own addresses, which no probe
// can (Linux does not answer its own ARP probe or Neighbour
// Solicitation), on the real kernel in a namespace of the test's own.
func TestOwnAddrFindsTheHostsAddresses(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	ns.AddVeth("lan0", "lan0-peer", 1500)
	ns.AddVeth("other0", "other0-peer", 1500)
	ns.AddAddr("lan0", "198.18.2.100/24")
	ns.AddAddr("lan0", "2001:db8:2::100/64")
	ns.AddAddr("other0", "198.18.9.1/32") // an address on another link: Linux answers ARP for it on lan0 too
	lan0 := ns.MustLink("lan0").Attrs().Index
	// AnyIP: a local route without an address; the host answers for it.
	_, anyip, _ := net.ParseCIDR("198.18.7.0/24")
	if err := ns.NL.RouteAdd(&netlink.Route{Dst: anyip, LinkIndex: ns.MustLink("lo").Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: unix.RT_SCOPE_HOST}); err != nil {
		t.Fatalf("add the local route 198.18.7.0/24: %v", err)
	}
	// Prohibit and blackhole routes (Calico keeps its blocks so): the
	// kernel refuses the lookup; not the host's.
	for _, r := range []struct {
		dst string
		typ int
	}{{"198.18.40.0/24", unix.RTN_PROHIBIT}, {"198.18.41.0/24", unix.RTN_BLACKHOLE}, {"2001:db8:40::/64", unix.RTN_PROHIBIT}, {"2001:db8:41::/64", unix.RTN_BLACKHOLE}} {
		_, dst, _ := net.ParseCIDR(r.dst)
		if err := ns.NL.RouteAdd(&netlink.Route{Dst: dst, Type: r.typ}); err != nil {
			t.Fatalf("add the route to %s of type %d: %v", r.dst, r.typ, err)
		}
	}
	ns.Up("lo")
	var lanLL netip.Addr
	if !itest.WaitFor(5*time.Second, func() bool {
		as, err := ns.NL.AddrList(ns.MustLink("lan0"), netlink.FAMILY_V6)
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); err == nil && ok && ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				lanLL = ip
				return true
			}
		}
		return false
	}) {
		t.Fatal("lan0 has no usable link-local address 5s after it came up")
	}
	k := newKernel(t, ns)
	for _, c := range []struct {
		addr  string
		scope int
		own   bool
		link  string
	}{
		{"198.18.2.100", 0, true, "lan0"},
		{"2001:db8:2::100", 0, true, "lan0"},
		{"::ffff:198.18.2.100", 0, true, "lan0"},
		{"198.18.9.1", lan0, true, "other0"},
		{"198.18.7.42", 0, true, ""},
		{lanLL.String(), lan0, true, "lan0"},
		{"198.18.2.101", 0, false, ""},
		{"198.18.2.255", 0, false, ""}, // the subnet's broadcast: not an address of the host's
		{"2001:db8:2::101", 0, false, ""},
		{"2001:db8:99::1", 0, false, ""}, // no route at all
		{"fe80::1", lan0, false, ""},
		{"198.18.40.5", 0, false, ""}, // prohibit
		{"198.18.41.5", 0, false, ""}, // blackhole
		{"2001:db8:40::5", 0, false, ""},
		{"2001:db8:41::5", 0, false, ""},
	} {
		link, own, err := k.OwnAddr(context.Background(), netip.MustParseAddr(c.addr), c.scope)
		if err != nil || own != c.own || link != c.link {
			t.Errorf("OwnAddr(%s, scope %d) = %q, %v, %v; want %q, %v, nil", c.addr, c.scope, link, own, err, c.link, c.own)
		}
	}
	var _ netlinkutil.Links = k
}
