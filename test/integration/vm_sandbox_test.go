//go:build vm

package integration

import (
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// Endpoint links travel: libnetwork moves the link into the container's
// namespace as eth0 on join and back under its SrcName on leave. After the
// round trip Leave, or DeleteEndpoint alone, deletes it; a link that died
// with its container's namespace leaves cleanly; and a daemon restarted
// while the link is in a container deletes it once it is back. Nothing is
// left.
func TestVMEndpointLinkMovedToContainerAndBack(t *testing.T) {
	t.Parallel()
	ns, d := vmSetup(t, itest.DaemonOptions{})
	nets := []struct {
		id   string
		net  itest.Net
		kind string
	}{
		{vmNet(1), itest.Net{ID: vmNet(1), Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(1), V6: vmPool6(1)}, "macvlan"},
		{vmNet(2), itest.Net{ID: vmNet(2), Opts: map[string]string{"parent": "d1", "ipvlan_mode": "l3s"}, V4: vmPool4(2), V6: vmPool6(2)}, "ipvlan"},
		{vmNet(3), itest.Net{ID: vmNet(3), Internal: true, V4: vmPool4(3)}, "macvlan"},
	}
	for _, n := range nets {
		d.MustCreateNetwork(n.net)
	}
	parents := []string{"d0.10", vmDummy(vmNet(3))}
	ns.WantLinks(vmWith(parents...)...)

	// Docker gives an endpoint an address in every family of its network.
	addr6For := func(x, h int) string {
		if len(nets[x-1].net.V6) > 0 {
			return vmAddr6(x, h)
		}
		return ""
	}
	inContainer := func(x, h int, ep string) (*itest.Netns, network.JoinResponse, string) {
		t.Helper()
		addr6 := addr6For(x, h)
		j := vmJoin(d, vmNet(x), ep, vmAddr4(x, h), addr6)
		sb := itest.NewNetns(t)
		eth := itest.JoinSandbox(ns, sb, j, vmAddr4(x, h), addr6)
		if ns.Link(vmLink(ep)) != nil {
			t.Fatalf("%s still in the host namespace after the move", vmLink(ep))
		}
		if got := sb.MustLink(eth).Type(); got != nets[x-1].kind {
			t.Fatalf("%s in the container is a %s link, want %s", eth, got, nets[x-1].kind)
		}
		return sb, j, eth
	}
	for i := range nets {
		x := i + 1
		// Back, then Leave and DeleteEndpoint (what Docker does).
		ep := vmEp(10*x + 1)
		sb, _, eth := inContainer(x, 11, ep)
		itest.LeaveSandbox(ns, sb, eth, vmLink(ep))
		ns.WantLinks(vmWith(append(parents, vmLink(ep))...)...)
		d.RemoveEndpoint(vmNet(x), ep)
		ns.WantLinks(vmWith(parents...)...)

		// Back, then DeleteEndpoint without Leave.
		ep = vmEp(10*x + 2)
		sb, _, eth = inContainer(x, 12, ep)
		itest.LeaveSandbox(ns, sb, eth, vmLink(ep))
		d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: vmNet(x), EndpointID: ep}, nil)
		ns.WantLinks(vmWith(parents...)...)

		// The container's namespace is destroyed with the link in it.
		ep = vmEp(10*x + 3)
		j := vmJoin(d, vmNet(x), ep, vmAddr4(x, 13), addr6For(x, 13))
		box, destroy := itest.NewDisposableNetns(t)
		itest.JoinSandbox(ns, box, j, vmAddr4(x, 13), addr6For(x, 13))
		destroy()
		d.RemoveEndpoint(vmNet(x), ep)
		ns.WantLinks(vmWith(parents...)...)
	}

	// kill -9 while a link is in a container; it comes back after the
	// restart and is deleted by Leave.
	ep := vmEp(99)
	sb, _, eth := inContainer(2, 99, ep)
	d.Restart()
	ns.WantLinks(vmWith(parents...)...)
	itest.LeaveSandbox(ns, sb, eth, vmLink(ep))
	d.RemoveEndpoint(vmNet(2), ep)
	ns.WantLinks(vmWith(parents...)...)

	for _, n := range nets {
		d.DeleteNetwork(n.id)
	}
	ns.WantLinks(vmBase...)
	wantRecords(t, d, 0)
}
