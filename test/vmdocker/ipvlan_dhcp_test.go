//go:build vmdocker

package vmdocker

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
)

// The test LAN: lan0 in the engine's namespace, its peer with the router
// and DHCP server 198.18.190.1/24 (itest.DHCPServer, pool .100-.149).
var (
	lanServer = netip.MustParsePrefix("198.18.190.1/24")
	lanRoute  = netip.MustParsePrefix("198.18.191.0/24") // option 121's other route, via the router
)

// leaseTime puts T1 at 20 s, inside the test: renewals of leases whose
// links are in Docker's containers are seen too.
const leaseTime = 40 * time.Second

// dhcpCtr is a container of the network as Docker, the container and
// the server see it.
type dhcpCtr struct {
	name     string
	endpoint string // Docker's endpoint ID
	addr     netip.Addr
	lease    itest.ServerLease
}

// TestDockerIpvlanDHCP (issue 14): `docker network create -d underlay
// --ipam-driver null -o parent=lan0 -o type=ipvlan -o dhcp=true` and two
// `docker run --network` containers through a real dockerd with underlay
// as its legacy plugin. The containers get distinct addresses of the
// server's pool: docker inspect shows what the containers' eth0 holds;
// eth0 has the parent's MAC (ipvlan) and the routes of the lease (option
// 121: the default route and another via the router); the server's lease
// table holds both addresses for the parent's MAC, each with the client
// ID "underlay-"+Docker's endpoint ID (type 0). The containers reach the
// router and each other; the leases are renewed at T1; `docker rm -f`
// releases a container's lease (the server frees it) and leaves the
// other's; removing the network leaves no link behind.
func TestDockerIpvlanDHCP(t *testing.T) {
	start := time.Now()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	itest.RequireDocker(t)
	router := lanServer.Addr()
	lan := itest.NewLAN(t, ns, "lan0", lanServer)
	srv := lan.Serve(itest.DHCPConfig{LeaseTime: leaseTime,
		Routes: []itest.DHCPRoute{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: router}, {Dst: lanRoute, Gateway: router}}})
	parentMAC := ns.MustLink("lan0").Attrs().HardwareAddr

	dk := itest.StartDockerd(t, ns)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Env: []string{"DOCKER_HOST=" + dk.Host()}})
	itest.LegacyPlugin(t, "underlay", d.Socket)
	image := dk.ImportBusybox("bb:vm")
	t.Logf("dockerd, underlay (legacy plugin) and image %.19s ready after %s", image, time.Since(start).Round(100*time.Millisecond))

	id := dk.Must("network", "create", "-d", "underlay", "--ipam-driver", "null",
		"-o", "parent=lan0", "-o", "type=ipvlan", "-o", "dhcp=true", "ipv")
	t.Cleanup(func() { _, _ = dk.Docker("network", "rm", "ipv") })
	cs := []*dhcpCtr{{name: "c14a"}, {name: "c14b"}}
	for _, c := range cs {
		t.Cleanup(func() { _, _ = dk.Docker("rm", "-f", c.name) })
		t0 := time.Now()
		dk.Must("run", "-d", "--stop-timeout", "1", "--name", c.name, "--network", "ipv", "bb:vm", "sleep", "86400")
		t.Logf("docker run %s took %s", c.name, time.Since(t0).Round(100*time.Millisecond))
	}
	t.Logf("network %.12s and both containers up after %s", id, time.Since(start).Round(100*time.Millisecond))

	for _, c := range cs {
		var nets map[string]struct {
			EndpointID, IPAddress, Gateway, MacAddress string
			IPPrefixLen                                int
		}
		dk.JSON(&nets, "inspect", "-f", "{{json .NetworkSettings.Networks}}", c.name)
		n, ok := nets["ipv"]
		addr, err := netip.ParseAddr(n.IPAddress)
		if !ok || err != nil || !inPool(addr) || n.IPPrefixLen != lanServer.Bits() || len(n.EndpointID) != 64 {
			t.Fatalf("docker inspect %s: %+v: want an address of the server's pool %s-%s with prefix length %d on ipv", c.name, nets, pool(0), pool(49), lanServer.Bits())
		}
		if n.Gateway != router.String() {
			t.Errorf("docker inspect %s: gateway %q, want the router %s", c.name, n.Gateway, router)
		}
		c.addr, c.endpoint = addr, n.EndpointID

		// The container's own view of eth0.
		out := dk.Must("exec", c.name, "sh", "-c", "ip -4 addr show dev eth0; cat /sys/class/net/eth0/address; ip -4 route")
		for _, want := range []string{fmt.Sprintf("inet %s/%d ", addr, lanServer.Bits()), parentMAC.String(),
			"default via " + router.String() + " dev eth0", lanRoute.String() + " via " + router.String() + " dev eth0"} {
			if !strings.Contains(out, want) {
				t.Errorf("in %s (ip -4 addr show dev eth0; its MAC; ip -4 route):\n%s\nwant %q", c.name, out, want)
			}
		}
		if k := strings.Count(out, "inet "); k != 1 {
			t.Errorf("in %s eth0 has %d IPv4 addresses, want only the lease's:\n%s", c.name, k, out)
		}

		// The server's view.
		l, held := srv.Lease(addr)
		wantID := append([]byte{0}, "underlay-"+c.endpoint...)
		if !held || !bytes.Equal(l.MAC, parentMAC) || !bytes.Equal(l.ClientID, wantID) {
			t.Fatalf("%s has %s; the server's lease of it: held %v, MAC %s, client ID %q: want the parent's MAC %s and client ID %q\nleases:\n%s",
				c.name, addr, held, l.MAC, l.ClientID, parentMAC, wantID, srv.LeasesString())
		}
		c.lease = l
		t.Logf("%s: %s/%d gateway %s, docker inspect MAC %q, endpoint %.12s; the server: %s to %s id %q",
			c.name, addr, n.IPPrefixLen, n.Gateway, n.MacAddress, c.endpoint, l.Addr, l.MAC, l.ClientID)
	}
	a, b := cs[0], cs[1]
	if a.addr == b.addr || bytes.Equal(a.lease.ClientID, b.lease.ClientID) {
		t.Fatalf("both containers got %s / client IDs %q and %q: want distinct addresses and client IDs", a.addr, a.lease.ClientID, b.lease.ClientID)
	}
	if ls := srv.Leases(); len(ls) != 2 {
		t.Fatalf("the server holds %d leases, want the containers' 2:\n%s", len(ls), srv.LeasesString())
	}

	for _, p := range []struct{ from, to string }{{a.name, router.String()}, {b.name, router.String()},
		{a.name, b.addr.String()}, {b.name, a.addr.String()}} {
		if err := dk.Ping(p.from, p.to, 30*time.Second); err != nil {
			t.Fatalf("%s cannot reach %s: %v", p.from, p.to, err)
		}
	}
	t.Logf("addresses, leases and pings checked after %s", time.Since(start).Round(100*time.Millisecond))

	// Renewal at T1, by client ID, with the links in the containers.
	for _, c := range cs {
		due := c.lease.Granted.Add(leaseTime / 2)
		if !itest.WaitFor(time.Until(due.Add(20*time.Second)), func() bool {
			l, ok := srv.Lease(c.addr)
			return ok && l.Acks > c.lease.Acks && bytes.Equal(l.ClientID, c.lease.ClientID)
		}) {
			t.Fatalf("%s's lease of %s was not renewed by %s (T1 %s + 20s):\n%s", c.name, c.addr, due.Add(20*time.Second).Format("15:04:05"), due.Format("15:04:05"), srv.MessagesString())
		}
		c.lease, _ = srv.Lease(c.addr)
	}

	// docker rm -f releases the lease; the other container keeps its own.
	dk.Must("rm", "-f", a.name)
	if !itest.WaitFor(15*time.Second, func() bool { _, held := srv.Lease(a.addr); return !held }) {
		t.Fatalf("docker rm -f %s: the server still holds %s:\n%s", a.name, a.addr, srv.MessagesString())
	}
	rel := srv.Messages(func(m itest.DHCPMessage) bool {
		return itest.From(parentMAC, a.lease.ClientID)(m) && m.Type == dhcpv4.MessageTypeRelease
	})
	if len(rel) != 1 || rel[0].ClientIP != a.addr {
		t.Fatalf("RELEASEs with %s's client ID: %v: want one, from %s", a.name, rel, a.addr)
	}
	if l, held := srv.Lease(b.addr); !held || !bytes.Equal(l.ClientID, b.lease.ClientID) {
		t.Fatalf("releasing %s's lease freed %s's %s too:\n%s", a.name, b.name, b.addr, srv.LeasesString())
	}
	if err := dk.Ping(b.name, router.String(), 30*time.Second); err != nil {
		t.Fatalf("after %s's release %s cannot reach the router: %v", a.name, b.name, err)
	}
	dk.Must("rm", "-f", b.name)
	if !itest.WaitFor(15*time.Second, func() bool { return len(srv.Leases()) == 0 }) {
		t.Fatalf("after both docker rm -f the server holds:\n%s", srv.LeasesString())
	}
	dk.Must("network", "rm", "ipv")
	ns.WantLinks("lo", "lan0")
	t.Logf("took %s", time.Since(start).Round(100*time.Millisecond))
}

// pool is the server's i-th pool address (.100 + i).
func pool(i int) netip.Addr {
	a := lanServer.Masked().Addr().As4()
	a[3] = byte(100 + i)
	return netip.AddrFrom4(a)
}

func inPool(a netip.Addr) bool { return !a.Less(pool(0)) && !pool(49).Less(a) }
