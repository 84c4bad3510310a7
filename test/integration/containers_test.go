package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// The container-side repair through the binary, with libnetwork played by
// the test: a Join names the container's namespace (SandboxKey), the test
// moves the link there as eth0 with its addresses and routes; the daemon
// reads it there. Deleting the parent deletes eth0 with it; when a link
// of the parent's name comes back, eth0 comes back.

// ctr is a played container: its namespace, and its endpoint.
type ctr struct {
	sb       *itest.Netns
	net, ep  string
	mac      string
	addr4    string
	addr6    string
	join     network.JoinResponse
	hostLink string
}

// runCtr creates and joins an endpoint whose sandbox is a new namespace,
// and plumbs it there as libnetwork does.
func runCtr(t *testing.T, ns *itest.Netns, d *itest.Daemon, netID, epID, addr4, addr6 string) *ctr {
	t.Helper()
	c := &ctr{sb: itest.NewNetns(t), net: netID, ep: epID, addr4: addr4, addr6: addr6}
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID,
		Interface: &network.EndpointInterface{Address: addr4, AddressIPv6: addr6}}, &ce)
	d.MustCall("Join", network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: c.sb.Path()}, &c.join)
	if ce.Interface != nil { // ipvlan: no MAC of its own
		c.mac = ce.Interface.MacAddress
	}
	c.hostLink = c.join.InterfaceName.SrcName
	itest.JoinSandbox(ns, c.sb, c.join, addr4, addr6)
	return c
}

// waitRead waits until `underlay ls` shows the endpoint's interface read
// in its container.
func waitRead(t *testing.T, d *itest.Daemon, epID string) {
	t.Helper()
	waitEndpoint(t, d, epID, 10*time.Second, func(e control.EndpointEntry) bool { return e.Interface == "eth0" })
}

func waitEndpoint(t *testing.T, d *itest.Daemon, epID string, within time.Duration, ok func(control.EndpointEntry) bool) control.EndpointEntry {
	t.Helper()
	var last control.EndpointEntry
	deadline := time.Now().Add(within)
	for {
		out, err := exec.Command(itest.Binary(t), "ls", "--socket", d.Socket, "--docker-host", "unix:///nonexistent/docker.sock", "--json").Output()
		var l control.Listing
		if err == nil && json.Unmarshal(out, &l) == nil {
			for _, n := range l.Networks {
				for _, e := range n.Endpoints {
					if e.ID == epID {
						last = e
						if ok(e) {
							return e
						}
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint %s in underlay ls: %+v after %s (%v)", epID, last, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantEth0 waits until the container has eth0 as the Join plumbed it:
// MAC, MTU, addresses, default routes, up, marked.
func (c *ctr) wantEth0(t *testing.T, mtu int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var why string
	for {
		if why = c.eth0Problem(mtu); why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container of %s: %s after %s", c.ep, why, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *ctr) eth0Problem(mtu int) string {
	l, err := c.sb.NL.LinkByName("eth0")
	if err != nil {
		return "no eth0"
	}
	a := l.Attrs()
	if (c.mac != "" && a.HardwareAddr.String() != c.mac) || a.MTU != mtu || a.Flags&net.FlagUp == 0 || !strings.HasPrefix(a.Alias, "underlay:") {
		return fmt.Sprintf("eth0 mac %s mtu %d flags %v alias %q (want %s, %d, up, underlay's mark)", a.HardwareAddr, a.MTU, a.Flags, a.Alias, c.mac, mtu)
	}
	addrs, _ := c.sb.NL.AddrList(l, netlink.FAMILY_ALL)
	for _, want := range []string{c.addr4, c.addr6} {
		if want == "" {
			continue
		}
		found := false
		for _, x := range addrs {
			found = found || x.IPNet.String() == want
		}
		if !found {
			return fmt.Sprintf("eth0 lacks %s (has %v)", want, addrs)
		}
	}
	routes, _ := c.sb.NL.RouteList(l, netlink.FAMILY_ALL)
	for _, gw := range []string{c.join.Gateway, c.join.GatewayIPv6} {
		if gw == "" {
			continue
		}
		found := false
		for _, r := range routes {
			found = found || (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.String() == gw
		}
		if !found {
			return fmt.Sprintf("no default route via %s (routes %v)", gw, routes)
		}
	}
	return ""
}

// linksIn lists the links of a namespace but lo.
func linksIn(sb *itest.Netns) []string {
	var out []string
	for _, n := range sb.LinkNames() {
		if n != "lo" {
			out = append(out, n)
		}
	}
	return out
}

// remakeParent deletes the veth pair parent/peer and makes it again, the
// peer with the router's addresses.
func remakeParent(ns *itest.Netns, parent, peer string, mtu int, routerAddrs ...string) {
	ns.Delete(parent)
	ns.AddVeth(parent, peer, mtu)
	routerOn(ns, peer, routerAddrs...)
}

func routerOn(ns *itest.Netns, link string, addrs ...string) {
	l := ns.MustLink(link)
	for _, a := range addrs {
		ad, _ := netlink.ParseAddr(a)
		if strings.Contains(a, ":") {
			ad.Flags = 0x02 // IFA_F_NODAD
		}
		_ = ns.NL.AddrAdd(l, ad)
	}
}

func TestContainerInterfaceComesBackWithItsParent(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	router := []string{"198.18.40.1/24", "2001:db8:40::1/64"}
	routerOn(ns, "vp0-peer", router...)
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "address_probe": "0", "lan_check": "false"},
		V4: []string{"198.18.40.0/24,198.18.40.1/24"}, V6: []string{"2001:db8:40::/64,2001:db8:40::1/64"}})
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp1", "mtu": "9000", "address_probe": "0", "lan_check": "false"},
		V4: []string{"198.18.41.0/24,198.18.41.1/24"}})

	a := runCtr(t, ns, d, netA, epA, "198.18.40.10/24", "2001:db8:40::10/64")
	gone := runCtr(t, ns, d, netA, epB, "198.18.40.11/24", "")    // its namespace is taken by another
	stopped := runCtr(t, ns, d, netA, epC, "198.18.40.12/24", "") // stopped while the parent is gone
	taken := runCtr(t, ns, d, netA, epD, "198.18.40.13/24", "")   // has a link named eth0 when it comes back
	mtu := runCtr(t, ns, d, netB, epE, "198.18.41.10/24", "")
	for _, c := range []*ctr{a, gone, stopped, taken, mtu} {
		waitRead(t, d, c.ep)
	}
	if err := itest.Ping(a.sb, "198.18.40.10", "198.18.40.1", 5*time.Second); err != nil {
		t.Fatalf("before: %v", err)
	}

	other := itest.NewNetns(t)
	gone.sb.Replace(other)
	ns.Delete("vp0")
	for _, c := range []*ctr{a, stopped, taken} {
		waitGone(t, c.sb)
	}
	// Docker stops a container while the parent is gone: Leave and
	// DeleteEndpoint find no link, and the endpoint is forgotten.
	d.RemoveEndpoint(netA, epC)
	// Something else names itself eth0 in that container meanwhile.
	taken.sb.AddVeth("eth0", "eth0-peer", 1500)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	routerOn(ns, "vp0-peer", router...)

	a.wantEth0(t, 1500, 10*time.Second)
	if err := itest.Ping(a.sb, "198.18.40.10", "198.18.40.1", 5*time.Second); err != nil {
		t.Fatalf("after the repair, IPv4: %v", err)
	}
	if err := itest.Ping(a.sb, "2001:db8:40::10", "2001:db8:40::1", 5*time.Second); err != nil {
		t.Fatalf("after the repair, IPv6: %v", err)
	}
	if e := waitEndpoint(t, d, epA, 5*time.Second, func(e control.EndpointEntry) bool { return e.Repairs == 1 }); !e.Joined {
		t.Fatalf("repaired endpoint in ls: %+v", e)
	}
	itest.WaitMetric(t, d, `underlay_container_repairs_total{result="repaired"}`, 1, 5*time.Second)
	itest.WaitMetric(t, d, `underlay_container_repairs_total{result="gone"}`, 1, 5*time.Second)
	itest.WaitMetric(t, d, `underlay_container_repairs_total{result="failed"}`, 1, 5*time.Second)
	if !d.WaitLog(5*time.Second, "the container has a link of its name") {
		t.Fatal("no WARN for the container whose eth0 name was taken")
	}
	// Left alone: the namespace that took the path, the stopped one, and
	// the veth that holds the name.
	if got := linksIn(other); len(got) != 0 {
		t.Fatalf("the namespace that took a container's path got links %v", got)
	}
	if got := linksIn(stopped.sb); len(got) != 0 {
		t.Fatalf("a container stopped while its parent was gone got links %v", got)
	}
	if l := taken.sb.MustLink("eth0"); l.Type() != "veth" {
		t.Fatalf("the container's own eth0 was replaced by a %s link", l.Type())
	}

	// The parent flaps 50 times: the interface is there at the end, once.
	for range 50 {
		remakeParent(ns, "vp0", "vp0-peer", 1500)
	}
	routerOn(ns, "vp0-peer", router...)
	a.wantEth0(t, 1500, 15*time.Second)
	if got := linksIn(a.sb); len(got) != 1 {
		t.Fatalf("after 50 flaps the container has %v", got)
	}
	if err := itest.Ping(a.sb, "198.18.40.10", "198.18.40.1", 5*time.Second); err != nil {
		t.Fatalf("after 50 flaps: %v", err)
	}

	// The parent comes back with a lower MTU: not made (named in a WARN),
	// then made once the MTU is set back.
	remakeParent(ns, "vp1", "vp1-peer", 1500)
	if !d.WaitLog(10*time.Second, "came back with MTU 1500, below the container's interface's 9000") {
		t.Fatal("no WARN naming the parent's MTU")
	}
	if got := linksIn(mtu.sb); len(got) != 0 {
		t.Fatalf("container on a parent with a lower MTU has %v", got)
	}
	if err := ns.NL.LinkSetMTU(ns.MustLink("vp1"), 9000); err != nil {
		t.Fatal(err)
	}
	mtu.wantEth0(t, 9000, 10*time.Second)

	// The parent comes back as a tun (no Ethernet: nothing to stand on),
	// then as a bridge (Ethernet) of the same name and MTU.
	ns.Delete("vp1")
	waitGone(t, mtu.sb)
	// A tun is made through /dev/net/tun, in the namespace of the thread
	// that opens it: inside ns.
	if err := ns.Do(func() error {
		return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: "vp1", MTU: 9000}, Mode: netlink.TUNTAP_MODE_TUN})
	}); err != nil {
		t.Fatal(err)
	}
	if ns.Link("vp1") == nil {
		t.Fatal("the tun vp1 is not in the test's namespace")
	}
	if !d.WaitLog(10*time.Second, "without Ethernet") {
		t.Fatal("no WARN for a parent that came back without Ethernet")
	}
	if got := linksIn(mtu.sb); len(got) != 0 {
		t.Fatalf("container on a tun parent has %v", got)
	}
	ns.Delete("vp1")
	if err := ns.NL.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "vp1", MTU: 9000}}); err != nil {
		t.Fatal(err)
	}
	ns.Up("vp1")
	mtu.wantEth0(t, 9000, 10*time.Second)

	// Docker stops the repaired container: its interface goes back to the
	// host under its host name and is deleted with the endpoint. Nothing
	// is left.
	itest.LeaveSandbox(ns, a.sb, "eth0", a.hostLink)
	d.RemoveEndpoint(netA, epA)
	itest.LeaveSandbox(ns, mtu.sb, "eth0", mtu.hostLink)
	d.RemoveEndpoint(netB, epE)
	d.RemoveEndpoint(netA, epB)
	d.RemoveEndpoint(netA, epD)
	ns.WantLinks("lo", "vp0", "vp0-peer", "vp1") // vp1 is the bridge now
}

// waitGone waits until the container's namespace has no link but lo.
func waitGone(t *testing.T, sb *itest.Netns) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(linksIn(sb)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the container still has %v after its parent was deleted", linksIn(sb))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A parent that never comes back: after the wait, the containers are left
// as they are and the daemon says so; one that comes back later is not
// touched. A daemon killed while the parent is gone makes the interface
// again after its restart, from its record.
func TestContainerRepairWaitAndRestart(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--container-repair-wait", "2s"}})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "address_probe": "0", "lan_check": "false"},
		V4: []string{"198.18.42.0/24,198.18.42.1/24"}})
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "vp1", "address_probe": "0", "lan_check": "false"},
		V4: []string{"198.18.43.0/24,198.18.43.1/24"}})
	late := runCtr(t, ns, d, netA, epA, "198.18.42.10/24", "")
	kept := runCtr(t, ns, d, netB, epB, "198.18.43.10/24", "")
	// A container whose default route is another network's (libnetwork
	// sets the gateway of its gateway endpoint only): its interface on
	// netB comes back without a default route, and its own stays.
	second := &ctr{sb: itest.NewNetns(t), net: netB, ep: epC, addr4: "198.18.43.11/24"}
	second.sb.AddVeth("eth1", "eth1-peer", 1500)
	routerOn(second.sb, "eth1", "198.18.44.2/24")
	second.sb.Up("eth1")
	if err := second.sb.NL.RouteAdd(&netlink.Route{LinkIndex: second.sb.MustLink("eth1").Attrs().Index, Gw: net.ParseIP("198.18.44.1")}); err != nil {
		t.Fatal(err)
	}
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epC,
		Interface: &network.EndpointInterface{Address: second.addr4}}, &ce)
	d.MustCall("Join", network.JoinRequest{NetworkID: netB, EndpointID: epC, SandboxKey: second.sb.Path()}, &second.join)
	second.mac, second.hostLink = ce.Interface.MacAddress, second.join.InterfaceName.SrcName
	noGateway := second.join
	noGateway.Gateway = ""
	itest.JoinSandbox(ns, second.sb, noGateway, second.addr4)
	waitRead(t, d, epA)
	waitRead(t, d, epB)
	waitRead(t, d, epC)

	ns.Delete("vp0")
	waitGone(t, late.sb)
	if !d.WaitLog(10*time.Second, "its parent link did not come back in time") {
		t.Fatal("no WARN for a parent that did not come back")
	}
	itest.WaitMetric(t, d, `underlay_container_repairs_total{result="abandoned"}`, 1, 5*time.Second)

	// The daemon dies while vp1 is gone; vp0 comes back meanwhile.
	ns.Delete("vp1")
	waitGone(t, kept.sb)
	d.Kill()
	ns.AddVeth("vp0", "vp0-peer", 1500)
	ns.AddVeth("vp1", "vp1-peer", 9000)
	d.Start()
	kept.wantEth0(t, 9000, 10*time.Second)
	second.join.Gateway = ""
	second.wantEth0(t, 9000, 10*time.Second)
	routes, err := second.sb.NL.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	isDefault := func(r netlink.Route) bool {
		if r.Dst == nil {
			return true
		}
		ones, _ := r.Dst.Mask.Size()
		return ones == 0
	}
	for _, r := range routes {
		if isDefault(r) && r.Gw.String() != "198.18.44.1" {
			t.Fatalf("the repair put a default route via %s in a container whose default route is another network's: %v", r.Gw, routes)
		}
	}
	if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return isDefault(r) && r.Gw.String() == "198.18.44.1" }) {
		t.Fatalf("the container's own default route is gone: %v", routes)
	}
	// The restarted daemon forgot it gave up: the container whose parent
	// is back gets its interface too (a restart is the operator's word).
	late.wantEth0(t, 1500, 10*time.Second)
}

// A DHCP container whose parent (a bridge whose port is the LAN) is
// deleted and made again gets its eth0 back with its lease, which is then
// renewed from the new parent: the server's ACKs for it go on.
func TestContainerRepairKeepsTheDHCPLease(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	lan := itest.NewLAN(t, ns, "lan0", dhcpServer)
	srv := lan.Serve(itest.DHCPConfig{LeaseTime: dhcpLease})
	makeBridge := func() {
		t.Helper()
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: 1500}}
		if err := ns.NL.LinkAdd(br); err != nil {
			t.Fatal(err)
		}
		if err := ns.NL.LinkSetMaster(ns.MustLink("lan0"), ns.MustLink("br0")); err != nil {
			t.Fatal(err)
		}
		ns.Up("br0")
	}
	makeBridge()
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
	d.MustCall("CreateNetwork", itest.DHCPNetwork(netA, "br0", "dhcp_timeout=3s", "lan_check=false"), nil)
	c := &ctr{sb: itest.NewNetns(t), net: netA, ep: epA}
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA, Interface: &network.EndpointInterface{}}, &ce)
	d.MustCall("Join", network.JoinRequest{NetworkID: netA, EndpointID: epA, SandboxKey: c.sb.Path()}, &c.join)
	c.mac, c.addr4, c.hostLink = ce.Interface.MacAddress, ce.Interface.Address, c.join.InterfaceName.SrcName
	itest.JoinSandbox(ns, c.sb, c.join, c.addr4)
	waitRead(t, d, epA)
	addr := netip.MustParsePrefix(c.addr4).Addr()

	ns.Delete("br0")
	waitGone(t, c.sb)
	makeBridge()
	c.wantEth0(t, 1500, 10*time.Second)
	if err := itest.Ping(c.sb, addr.String(), dhcpServer.Addr().String(), 5*time.Second); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
	l, ok := srv.Lease(addr)
	if !ok || l.MAC.String() != c.mac {
		t.Fatalf("the server's lease of %s after the repair: %+v (%v)", addr, l, ok)
	}
	// Renewed from the new parent: one more ACK within the lease time.
	acks := l.Acks
	if !itest.WaitFor(dhcpLease, func() bool { now, ok := srv.Lease(addr); return ok && now.Acks > acks && now.MAC.String() == c.mac }) {
		t.Fatalf("the lease of %s was not renewed after the repair:\n%s", addr, srv.MessagesString())
	}
	itest.LeaveSandbox(ns, c.sb, "eth0", c.hostLink)
	d.RemoveEndpoint(netA, epA)
}
