package itest

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/underlay-net/underlay/internal/netnsrun"
)

// FillGroup is the link group (IFLA_GROUP) of the links Fill makes: one
// RTM_DELLINK naming the group deletes them all, in one batch, which
// takes a fraction of a second where deleting thousands of veth pairs one
// by one takes a kernel synchronisation each.
const FillGroup = 0x75f1

// MaxFill is the most links Fill makes: its address plan (one /31 per pair
// in 198.19.0.0/17) runs out beyond it.
const MaxFill = 32768

// OpenNetns opens an existing namespace by path (a /run/netns/NAME) for a
// test that does not own it: its handles are closed at cleanup, the
// namespace and its links stay.
func OpenNetns(t testing.TB, path string) *Netns {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open network namespace %s: %v", path, err)
	}
	nlh, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		t.Fatalf("netlink handle in namespace %s: %v", path, err)
	}
	t.Cleanup(func() { nlh.Close(); h.Close() })
	return &Netns{t: t, handle: h, NL: nlh}
}

// Fill makes a busy host of the namespace: links more links (an even
// number, at most MaxFill), as links/2 veth pairs fa<k> and fb<k>, both
// ends up, each pair with an IPv4 address on fa<k>, 198.19.0.0/17 + 2k, a
// /31 (its connected route with it), and a route to a /32 of
// 198.19.128.0/17 (+k) via the pair's other address, 198.19.0.0/17 +
// 2k+1, through fa<k>. Only 198.19.0.0/16, a benchmark range, so
// 198.18.0.0/16 stays the test's: the host is on none of it.
//
// The links get no IPv6 address, not even a link-local one (address
// generation mode none, set before they come up): each link coming up or
// going makes the kernel walk the namespace's whole IPv6 route tree, so
// with a link-local address and its routes on every link 8,000 links took
// 47 s to make and 24 s to delete on the 2-core machine, against 5 s and
// 3 s without.
//
// The links are in group FillGroup and are deleted at cleanup with one
// request (Unfill); a namespace that is destroyed takes them with it
// anyway.
func (n *Netns) Fill(links int) {
	n.t.Helper()
	if links%2 != 0 || links < 0 || links > MaxFill {
		n.t.Fatalf("Fill(%d): want an even number of links from 0 to %d", links, MaxFill)
	}
	if links == 0 {
		return
	}
	n.t.Cleanup(func() {
		if err := n.Unfill(); err != nil {
			n.t.Errorf("delete the filled links: %v", err)
		}
	})
	v4 := func(i int) net.IP { return net.IPv4(198, 19, byte(i>>8), byte(i)) }
	for k := 0; k < links/2; k++ {
		a, b := fmt.Sprintf("fa%d", k), fmt.Sprintf("fb%d", k)
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, MTU: 1500, Group: FillGroup}, PeerName: b}
		if err := n.NL.LinkAdd(v); err != nil {
			n.t.Fatalf("fill: add veth %s: %v", a, err)
		}
		peer := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: b}}
		for _, l := range []netlink.Link{v, peer} {
			if err := n.NL.LinkSetIP6AddrGenMode(l, addrGenModeNone); err != nil {
				n.t.Fatalf("fill: no IPv6 link-local address on %s: %v", l.Attrs().Name, err)
			}
			if err := n.NL.LinkSetUp(l); err != nil {
				n.t.Fatalf("fill: set %s up: %v", l.Attrs().Name, err)
			}
		}
		if err := n.NL.AddrAdd(v, &netlink.Addr{IPNet: &net.IPNet{IP: v4(2 * k), Mask: net.CIDRMask(31, 32)}}); err != nil {
			n.t.Fatalf("fill: address on %s: %v", a, err)
		}
		r := &netlink.Route{LinkIndex: v.Attrs().Index, Dst: &net.IPNet{IP: v4(32768 + k), Mask: net.CIDRMask(32, 32)}, Gw: v4(2*k + 1)}
		if err := n.NL.RouteAdd(r); err != nil {
			n.t.Fatalf("fill: route %s via %s dev %s: %v", r.Dst, r.Gw, a, err)
		}
	}
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE (linux/if_link.h): no IPv6
// link-local address.
const addrGenModeNone = 1

// Unfill deletes every link of group FillGroup in the namespace (Fill's,
// with their peers, addresses and routes) in one request.
func (n *Netns) Unfill() error {
	return netnsrun.Do(n.handle, "the test's", func() error {
		req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(FillGroup)))
		_, err := req.Execute(unix.NETLINK_ROUTE, 0)
		if errors.Is(err, unix.ENODEV) { // none left
			return nil
		}
		return err
	})
}
