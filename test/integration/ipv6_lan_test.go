package integration

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPv6 from the LAN (-o ipv6_mode=slaac|dhcpv6) through the real binary:
// `underlay serve` in a namespace whose parents are veths to LANs of
// their own (itest.LAN6), each with dnsmasq as router (RAs) and, for
// dhcpv6, DHCPv6 server. The test does what libnetwork and the engine
// do with an endpoint (CreateEndpoint, Join, the link moved into a
// "container" namespace, the answered address put on it with NODAD, the
// link up) and checks what the container's namespace then has, and the
// server's lease file; a lost lease's address blocked on the parent until
// it is won back. ipvlan endpoints need the VM (this host's kernel has no
// ipvlan): vm_ipv6_test.go, with dnsmasq bundled into the VM.

// lan6Network is a CreateNetwork as the current engine sends it for
// `docker network create --ipv6 --ipam-driver null -o parent=PARENT -o
// ipv6_mode=MODE`.
func lan6Network(id, parent, mode string) *network.CreateNetworkRequest {
	return &network.CreateNetworkRequest{NetworkID: id,
		// lan_check=false: the tests read what the network's endpoints
		// send, and the LAN preflight's Solicit and RS would be among it.
		Options:  map[string]any{"com.docker.network.generic": map[string]any{"parent": parent, "ipv6_mode": mode, "lan_check": "false"}, "com.docker.network.enable_ipv6": true},
		IPv4Data: []*network.IPAMData{{AddressSpace: "null", Pool: "0.0.0.0/0"}},
		IPv6Data: []*network.IPAMData{{AddressSpace: "null", Pool: "::/0"}}}
}

// container6 is an endpoint as the engine plugs it into a container: the
// link Join named moved into a namespace of its own as eth0, the address
// CreateEndpoint answered on it (NODAD, as the engine adds it), up.
type container6 struct {
	ns   *itest.Netns
	mac  net.HardwareAddr
	addr netip.Prefix // as CreateEndpoint answered it
}

func plug6(t *testing.T, d *itest.Daemon, host *itest.Netns, netID, epID string) container6 {
	t.Helper()
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID,
		Interface: &network.EndpointInterface{}}, &ce)
	if ce.Interface == nil || ce.Interface.AddressIPv6 == "" || ce.Interface.Address != "" {
		t.Fatalf("CreateEndpoint %s answered %+v: want an IPv6 address (and a MAC), no IPv4", epID[:12], ce.Interface)
	}
	addr, err := netip.ParsePrefix(ce.Interface.AddressIPv6)
	if err != nil {
		t.Fatalf("CreateEndpoint answered IPv6 address %q: %v", ce.Interface.AddressIPv6, err)
	}
	var j network.JoinResponse
	d.MustCall("Join", network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/" + epID[:12]}, &j)
	c := container6{ns: itest.NewNetns(t), addr: addr}
	link := host.MustLink(j.InterfaceName.SrcName)
	if err := host.NL.LinkSetNsFd(link, int(c.ns.Handle())); err != nil {
		t.Fatalf("move %s into the container's namespace: %v", j.InterfaceName.SrcName, err)
	}
	l := c.ns.MustLink(j.InterfaceName.SrcName)
	if err := c.ns.NL.LinkSetName(l, "eth0"); err != nil {
		t.Fatal(err)
	}
	l = c.ns.MustLink("eth0")
	c.mac = l.Attrs().HardwareAddr
	if ce.Interface.MacAddress != "" && ce.Interface.MacAddress != c.mac.String() {
		t.Fatalf("CreateEndpoint answered MAC %s, the link has %s", ce.Interface.MacAddress, c.mac)
	}
	if err := c.ns.NL.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatalf("put %s on the container's eth0: %v", addr, err)
	}
	c.ns.Up("eth0")
	return c
}

// addrs6 are eth0's IPv6 addresses.
func (c container6) addrs6(t *testing.T) []netlink.Addr {
	return addrList6(t, c.ns, "eth0")
}

// addrList6 lists a link's IPv6 addresses. A dump the kernel interrupted
// (the namespace's addresses changed meanwhile: SLAAC, DAD) may miss some
// and is made again.
func addrList6(t *testing.T, ns *itest.Netns, name string) []netlink.Addr {
	t.Helper()
	for try := 1; ; try++ {
		addrs, err := ns.NL.AddrList(ns.MustLink(name), unix.AF_INET6)
		if errors.Is(err, netlink.ErrDumpInterrupted) && try < 100 {
			continue
		}
		if err != nil {
			t.Fatalf("IPv6 addresses of %s: %v", name, err)
		}
		return addrs
	}
}

func (c container6) String(t *testing.T) string {
	var s []string
	for _, a := range c.addrs6(t) {
		s = append(s, fmt.Sprintf("%s (flags %#x, preferred %d s, valid %d s)", a.IPNet, a.Flags, a.PreferedLft, a.ValidLft))
	}
	routes, _ := c.ns.NL.RouteList(nil, unix.AF_INET6)
	for _, r := range routes {
		s = append(s, "route "+r.String())
	}
	return strings.Join(s, "\n")
}

// waitAddr waits until eth0 has a usable (not tentative) address a.
func (c container6) waitAddr(t *testing.T, a netip.Addr, timeout time.Duration, what string) {
	t.Helper()
	if !itest.WaitFor(timeout, func() bool {
		for _, x := range c.addrs6(t) {
			if got, _ := netip.AddrFromSlice(x.IP); got == a && x.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s: eth0 has no address %s within %s:\n%s", what, a, timeout, c.String(t))
	}
}

// waitDefaultVia waits until the container has an IPv6 default route via
// the router's link-local address (from its advertisements).
func (c container6) waitDefaultVia(t *testing.T, router netip.Addr, timeout time.Duration) {
	t.Helper()
	if !itest.WaitFor(timeout, func() bool {
		routes, err := c.ns.NL.RouteList(nil, unix.AF_INET6)
		if err != nil {
			return false
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "::/0" {
				if gw, _ := netip.AddrFromSlice(r.Gw); gw == router {
					return true
				}
			}
		}
		return false
	}) {
		t.Fatalf("no IPv6 default route via the router's %s within %s:\n%s", router, timeout, c.String(t))
	}
}

// linkLocal is the link-local address of a link in a namespace.
func linkLocal(t *testing.T, ns *itest.Netns, name string) netip.Addr {
	t.Helper()
	for _, a := range addrList6(t, ns, name) {
		if a.IP.IsLinkLocalUnicast() {
			ip, _ := netip.AddrFromSlice(a.IP)
			return ip
		}
	}
	t.Fatalf("%s has no link-local address", name)
	return netip.Addr{}
}

// eui64 is prefix's address for mac by SLAAC (RFC 4862 with the EUI-64
// interface identifier of RFC 4291 appendix A).
func eui64(prefix netip.Prefix, mac net.HardwareAddr) netip.Addr {
	b := prefix.Addr().As16()
	b[8], b[9], b[10], b[11], b[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// noDocker is a --docker-host nothing answers: ls and doctor then skip
// Docker (a warning), which these tests do not need.
const noDocker = "unix:///nonexistent/docker.sock"

// lease6Listed is the endpoint's DHCPv6 lease as `underlay ls --json`
// shows it, and the endpoints' table of `underlay ls` (its row).
func lease6Listed(t *testing.T, d *itest.Daemon, netID, epID string) (*control.Lease6Entry, string) {
	t.Helper()
	var found *control.Lease6Entry
	for _, n := range lsJSON(t, d, noDocker).Networks {
		for _, e := range n.Endpoints {
			if n.ID == netID && e.ID == epID {
				if e.Lease6 == nil {
					t.Fatalf("ls --json lists endpoint %s without its DHCPv6 lease: %+v", epID[:12], e)
				}
				found = e.Lease6
			}
		}
	}
	if found == nil {
		t.Fatalf("ls --json does not list endpoint %s of network %s", epID[:12], netID[:12])
	}
	table, errOut, code := cli(t, "ls", "--socket", d.Socket, "--docker-host", noDocker)
	if code != 0 {
		t.Fatalf("underlay ls exited %d: %s", code, errOut)
	}
	var row string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, found.Address+" ") && strings.Contains(line, epID[:12]) {
			row = line
		}
	}
	if row == "" {
		t.Fatalf("ls's DHCPV6 LEASE table has no row for %s of endpoint %s:\n%s", found.Address, epID[:12], table)
	}
	return found, row
}

// dhcp6Leases is the daemon's underlay_dhcp6_leases{state=STATE}.
func dhcp6Leases(t *testing.T, d *itest.Daemon, state string) float64 {
	t.Helper()
	m := d.Scrape()
	v, ok := m[`underlay_dhcp6_leases{state="`+state+`"}`]
	if !ok {
		t.Fatalf("no underlay_dhcp6_leases{state=%q} in:\n%v", state, m)
	}
	return v
}

func TestIPv6FromTheLAN(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	slaacLAN := itest.NewLAN6(t, ns, "lan6s", netip.MustParsePrefix("2001:db8:61::1/64"))
	dhcpLAN := itest.NewLAN6(t, ns, "lan6d", netip.MustParsePrefix("2001:db8:60::1/64"))
	// Router advertisements every 4 s (dnsmasq's default is up to 10 min).
	ra := "--ra-param=" + itest.LAN6ServerLink + ",4"
	itest.StartDnsmasq(t, itest.DnsmasqConfig{NS: slaacLAN.Far, Interface: itest.LAN6ServerLink, Dir: t.TempDir(),
		Range: "::,constructor:" + itest.LAN6ServerLink + ",ra-only,64,2m", Extra: []string{"--enable-ra", ra}, Ready: "router advertisement on"})
	srv6 := dhcpLAN.ServeDHCPv6("2001:db8:60::100,2001:db8:60::1ff,64,2m", ra)
	lostLAN := itest.NewLAN6(t, ns, "lan6l", netip.MustParsePrefix("2001:db8:63::1/64"))
	lostRange := "2001:db8:63::100,2001:db8:63::1ff,64,2m"
	// One server DUID across its restarts (dnsmasq makes a new one with
	// each lease file): a RENEW names the server it asks.
	duid := "--dhcp-duid=32473,756e6465726c6179"
	srvLost := lostLAN.ServeDHCPv6(lostRange, ra, duid)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})

	t.Run("slaac", func(t *testing.T) {
		t.Parallel()
		const netID = "5a5a5a5a5a5a00000000000000000000000000000000000000000000000000a1"
		const epID = "5e5e5e5e5e5e00000000000000000000000000000000000000000000000000e1"
		d.MustCall("CreateNetwork", lan6Network(netID, "lan6s", "slaac"), nil)
		c := plug6(t, d, ns, netID, epID)
		ll, _ := netip.AddrFromSlice(net.IP(eui64(netip.MustParsePrefix("fe80::/64"), c.mac).AsSlice()))
		if c.addr != netip.PrefixFrom(ll, 64) {
			t.Fatalf("CreateEndpoint answered %s, want the endpoint's link-local %s/64", c.addr, ll)
		}
		global := eui64(netip.MustParsePrefix("2001:db8:61::/64"), c.mac)
		c.waitAddr(t, global, 20*time.Second, "the advertised prefix 2001:db8:61::/64")
		c.waitDefaultVia(t, linkLocal(t, slaacLAN.Far, itest.LAN6ServerLink), 20*time.Second)
		if err := itest.Ping(c.ns, global.String(), "2001:db8:61::1", 5*time.Second); err != nil {
			t.Fatalf("the container does not reach the router: %v", err)
		}
		// The LAN's prefix changes: a second one is advertised, and the
		// container forms its address in it by itself.
		srv := slaacLAN.Far.MustLink(itest.LAN6ServerLink)
		if err := slaacLAN.Far.NL.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8:62::1"), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
		next := eui64(netip.MustParsePrefix("2001:db8:62::/64"), c.mac)
		c.waitAddr(t, next, 20*time.Second, "the new prefix 2001:db8:62::/64")
		if err := itest.Ping(c.ns, next.String(), "2001:db8:62::1", 5*time.Second); err != nil {
			t.Fatalf("the container does not reach the router from its new address: %v", err)
		}
		// The daemon serves the dhcpv6 cases too: only this network's
		// endpoint, its MAC or its parent must not be in a DHCPv6 line.
		for _, line := range strings.Split(d.Log(), "\n") {
			if (strings.Contains(line, "DHCPv6") || strings.Contains(line, "dhcp6")) &&
				(strings.Contains(line, epID) || strings.Contains(line, netID) || strings.Contains(line, c.mac.String()) || strings.Contains(line, "parent=lan6s")) {
				t.Errorf("a slaac network talked DHCPv6: %s", line)
			}
		}
	})

	// Not parallel: it restarts the daemon the other two subtests share, so
	// it runs whole before they start (they are paused until this function
	// returns). In parallel, a request of theirs that fell in the restart
	// was refused and failed the test (make test, -parallel 4, under load).
	t.Run("dhcpv6", func(t *testing.T) {
		const netID = "6d6d6d6d6d6d00000000000000000000000000000000000000000000000000a2"
		const epID = "6e6e6e6e6e6e00000000000000000000000000000000000000000000000000e2"
		d.MustCall("CreateNetwork", lan6Network(netID, "lan6d", "dhcpv6"), nil)
		c := plug6(t, d, ns, netID, epID)
		if c.addr.Bits() != 128 || !netip.MustParsePrefix("2001:db8:60::/64").Contains(c.addr.Addr()) {
			t.Fatalf("CreateEndpoint answered %s: want an address of dnsmasq's range, /128", c.addr)
		}
		// dnsmasq writes its lease file after its Reply: awaited.
		l, ok := srv6.WaitLease6(5*time.Second, c.addr.Addr(), func(l itest.Dnsmasq6Lease) bool { return l.DUID == itest.HexColons(dhcp6.DUIDFromMAC(c.mac)) })
		if !ok {
			t.Fatalf("dnsmasq's lease of %s: %q (found %v), want one for the DUID-LL of the endpoint's MAC %s:\n%v", c.addr, l.Line, l.Line != "", c.mac, srv6.Leases6())
		}
		c.waitAddr(t, c.addr.Addr(), 5*time.Second, "the leased address")
		c.waitDefaultVia(t, linkLocal(t, dhcpLAN.Far, itest.LAN6ServerLink), 20*time.Second)
		if err := itest.Ping(c.ns, c.addr.Addr().String(), "2001:db8:60::1", 5*time.Second); err != nil {
			t.Fatalf("the container does not reach the router from its leased address: %v\n%s", err, c.String(t))
		}
		// The operator sees the lease as dnsmasq holds it: ls (JSON and
		// table) and the gauge (the daemon's only lease while this runs).
		listed, row := lease6Listed(t, d, netID, epID)
		duid := hex.EncodeToString(dhcp6.DUIDFromMAC(c.mac))
		if listed.Address != c.addr.Addr().String() || listed.DUID != duid || listed.IAID != fmt.Sprintf("%08x", l.IAID) || listed.State != "bound" ||
			listed.T1.IsZero() || !listed.T2.After(listed.T1) || !listed.Expiry.After(listed.T2) || !listed.Lost.IsZero() {
			t.Errorf("ls --json lease6 %+v: want %s bound, DUID %s and IAID %08x (dnsmasq's), T1 < T2 < expiry, not lost", listed, c.addr.Addr(), duid, l.IAID)
		}
		if !strings.Contains(row, duid) || !strings.Contains(row, "bound") {
			t.Errorf("ls's DHCPv6 row %q lacks the DUID %s or the state bound", row, duid)
		}
		if v := dhcp6Leases(t, d, "bound"); v != 1 {
			t.Errorf("underlay_dhcp6_leases{state=\"bound\"} = %v, want 1", v)
		}
		// Durable: a daemon restarted before T1 (60 s of dnsmasq's 2 min)
		// renews the lease from its record, for the same client.
		d.Restart()
		if !itest.WaitFor(80*time.Second, func() bool {
			now, ok := srv6.Lease6(c.addr.Addr())
			return ok && now.Expiry.After(l.Expiry) && now.DUID == l.DUID
		}) {
			t.Fatalf("the lease of %s was not renewed within 80 s (it expires %s):\n%v\n%s", c.addr, l.Expiry, srv6.Leases6(), d.Log())
		}
		// The engine moves the link back at Leave; DeleteEndpoint gives the lease back.
		link := c.ns.MustLink("eth0")
		if err := c.ns.NL.LinkSetNsFd(link, int(ns.Handle())); err != nil {
			t.Fatal(err)
		}
		d.MustCall("Leave", network.LeaveRequest{NetworkID: netID, EndpointID: epID}, nil)
		d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: epID}, nil)
		if !itest.WaitFor(5*time.Second, func() bool { _, ok := srv6.Lease6(c.addr.Addr()); return !ok }) {
			t.Fatalf("%s is still in dnsmasq's lease file after DeleteEndpoint:\n%v", c.addr, srv6.Leases6())
		}
		if !itest.WaitFor(10*time.Second, func() bool { return strings.Contains(d.Log(), "released IPv6 address") }) { // logged at the Reply, in the background
			t.Errorf("the daemon's log does not say it released the lease:\n%s", d.Log())
		}
	})

	// The server no longer has the lease (restarted with another range
	// and an empty lease file): the renewal at T1 is answered without it,
	// the lease is lost, and the container can no longer send from the
	// address (blocked on the parent, RFC 8415 18.2.10.1) while the daemon
	// asks for it every 30 s (another address offered is given back); the
	// server able to give it again, it is won back and works.
	t.Run("dhcpv6-lost", func(t *testing.T) {
		t.Parallel()
		const netID = "6c6c6c6c6c6c00000000000000000000000000000000000000000000000000a3"
		const epID = "6f6f6f6f6f6f00000000000000000000000000000000000000000000000000e3"
		d.MustCall("CreateNetwork", lan6Network(netID, "lan6l", "dhcpv6"), nil)
		c := plug6(t, d, ns, netID, epID)
		a := c.addr.Addr().String()
		c.waitAddr(t, c.addr.Addr(), 5*time.Second, "the leased address")
		c.waitDefaultVia(t, linkLocal(t, lostLAN.Far, itest.LAN6ServerLink), 20*time.Second)
		if err := itest.Ping(c.ns, a, "2001:db8:63::1", 5*time.Second); err != nil {
			t.Fatalf("the container does not reach the router from its leased address: %v\n%s", err, c.String(t))
		}
		srvLost.Stop()
		other := lostLAN.ServeDHCPv6("2001:db8:63::200,2001:db8:63::2ff,64,2m", ra, duid)
		if !itest.WaitFor(90*time.Second, func() bool { return strings.Contains(d.Log(), "lost a DHCPv6 lease") }) {
			t.Fatalf("the lease of %s was not lost within 90 s of the server forgetting it:\n%s\ndnsmasq:\n%s", a, d.Log(), other.Log())
		}
		for _, line := range strings.Split(d.Log(), "\n") {
			if strings.Contains(line, "lost a DHCPv6 lease") {
				t.Logf("daemon: %s", line)
			}
		}
		// The record says lost before the line is logged: ls, doctor
		// and the gauge show it (this subtest's is the daemon's only
		// DHCPv6 lease now).
		listed, row := lease6Listed(t, d, netID, epID)
		if listed.Address != a || listed.State != "lost" || listed.Lost.IsZero() || listed.LostWhy == "" || !strings.Contains(row, "lost") {
			t.Errorf("ls lists the lost lease as %+v, row %q: want %s lost, with when and why", listed, row, a)
		}
		out, errOut, code := cli(t, "doctor", "--socket", d.Socket, "--docker-host", noDocker)
		if code != control.ExitFindings || !strings.Contains(out, "lost-lease "+epID) || !strings.Contains(out, "lost its DHCPv6 lease of "+a+" (DUID "+listed.DUID+", IAID "+listed.IAID+")") {
			t.Errorf("doctor: exit %d, want %d with the lost-lease finding naming %s, its DUID and IAID:\n%s%s", code, control.ExitFindings, a, out, errOut)
		}
		if v := dhcp6Leases(t, d, "lost"); v != 1 {
			t.Errorf("underlay_dhcp6_leases{state=\"lost\"} = %v, want 1", v)
		}
		if err := itest.Ping(c.ns, a, "2001:db8:63::1", 2*time.Second); err == nil {
			t.Fatalf("the container still reaches the router from %s, whose lease is lost", a)
		}
		// Asked for again: the server offers another address, given back.
		if !itest.WaitFor(40*time.Second, func() bool { return strings.Contains(other.Log(), "DHCPRELEASE") }) {
			t.Fatalf("the address offered instead of the lost %s was not given back:\n%s\n%s", a, other.Log(), d.Log())
		}
		// dnsmasq logs the Release before it rewrites its lease file.
		var ls []itest.Dnsmasq6Lease
		if !itest.WaitFor(5*time.Second, func() bool { ls = other.Leases6(); return len(ls) == 0 }) {
			t.Errorf("dnsmasq still leases %v to the daemon", ls)
		}
		other.Stop()
		lostLAN.ServeDHCPv6(lostRange, ra, duid)
		if !itest.WaitFor(45*time.Second, func() bool { return strings.Contains(d.Log(), "won a lost IPv6 address back") }) {
			t.Fatalf("the lost %s was not won back within 45 s of the server offering it again:\n%s", a, d.Log())
		}
		if err := itest.Ping(c.ns, a, "2001:db8:63::1", 10*time.Second); err != nil {
			t.Fatalf("the container does not reach the router from %s once won back: %v", a, err)
		}
	})
}
