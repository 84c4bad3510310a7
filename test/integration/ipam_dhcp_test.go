package integration

// DHCP through underlay's IPAM (issue 36) through the real binary, against
// dnsmasq with its DNS on: the IPAM leases each endpoint's address with
// the MAC of its name, which CreateEndpoint answers and underlay mac
// prints; dnsmasq's lease file holds that MAC, the client ID of it and
// the name, and its DNS resolves the name; the same name gets the same
// MAC and address after a re-creation; another --mac-address is refused,
// and its lease given back.

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

func TestIPAMDHCPIdentityByName(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	lan := itest.NewLAN(t, ns, "lan4", netip.MustParsePrefix("198.18.184.1/24"))
	dns := itest.StartDnsmasq(t, itest.DnsmasqConfig{NS: lan.Far, Interface: itest.LANServerLink, Dir: t.TempDir(), DNS: true,
		Range: "198.18.184.100,198.18.184.150,255.255.255.0,2m", Options: []string{"3,198.18.184.1"}})
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
	const netID = "4d4a1c0000000000000000000000000000000000000000000000000000000036"

	var pool ipam.RequestPoolResponse
	d.MustIPAMCall("RequestPool", ipam.RequestPoolRequest{AddressSpace: itest.LocalSpace, Pool: "198.18.184.0/24",
		Options: map[string]string{"parent": "lan4", "dhcp": "true", "dhcp_fqdn": "true"}}, &pool)
	if gw := d.MustRequestAddress(pool.PoolID, "198.18.184.1", true); plain(gw) != "198.18.184.1" {
		t.Fatalf("gateway %s", gw)
	}
	d.MustCreateNetwork(itest.Net{ID: netID, Opts: map[string]string{"parent": "lan4"}, V4: []string{"198.18.184.0/24,198.18.184.1/24"}, Space: itest.LocalSpace})

	mac := nameMAC(t, d, "lan4", "web")
	ep := func(n int) string { return fmt.Sprintf("e%063d", n) }

	// First start: the name's MAC, its lease, its name on the LAN.
	addr := requestNamed(t, d, pool.PoolID, "web")
	ce, _ := d.Endpoint(netID, ep(1), addr+"/24", "", "")
	if ce.Interface == nil || ce.Interface.MacAddress != mac || ce.Interface.Address != "" {
		t.Fatalf("CreateEndpoint answered %+v: want only MAC %s (underlay mac's)", ce.Interface, mac)
	}
	if l := endpointLink(t, ns, mac); l == "" {
		t.Fatalf("no link of the endpoint with MAC %s", mac)
	}
	if l, ok := dns.WaitLease(10*time.Second, netip.MustParseAddr(addr), func(l itest.DnsmasqLease) bool { return l.MAC == mac }); !ok || l.Hostname != "web" || l.ClientID != "01:"+mac {
		t.Fatalf("dnsmasq's lease %q: want MAC %s, host name web and client ID 01:%s", l.Line, mac, mac)
	}
	waitResolves(t, lan.Far, "198.18.184.1", "web", addr)

	// docker rm -f web; docker run --name web: the same MAC and address.
	d.RemoveEndpoint(netID, ep(1)) // released here
	wantReleased(t, dns, addr, mac, 0)
	releaseAddr(t, d, pool.PoolID, addr)
	again := requestNamed(t, d, pool.PoolID, "web")
	ce, _ = d.Endpoint(netID, ep(2), again+"/24", "", "")
	if again != addr || ce.Interface == nil || ce.Interface.MacAddress != mac {
		t.Fatalf("re-created: %s with %+v; want %s with MAC %s", again, ce.Interface, addr, mac)
	}
	wantLease(t, dns, addr, mac, "web")

	// Another name: another MAC. --mac-address: refused naming the
	// name's, and the lease is given back at ReleaseAddress.
	db := requestNamed(t, d, pool.PoolID, "db")
	dbMAC := nameMAC(t, d, "lan4", "db")
	if db == addr || dbMAC == mac {
		t.Fatalf("db got %s MAC %s, web %s MAC %s", db, dbMAC, addr, mac)
	}
	wantLease(t, dns, db, dbMAC, "db")
	msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: ep(3),
		Interface: &network.EndpointInterface{Address: db + "/24", MacAddress: "02:00:00:00:00:01"}}, nil)
	for _, w := range []string{"02:00:00:00:00:01", dbMAC, "underlay mac --parent lan4 db", "drop --mac-address"} {
		if !strings.Contains(msg, w) {
			t.Fatalf("CreateEndpoint with another MAC answered %q: want it refused mentioning %q", msg, w)
		}
	}
	releaseAddr(t, d, pool.PoolID, db) // no endpoint took it: the IPAM releases it
	wantReleased(t, dns, db, dbMAC, 0)

	// --ip another than the server gives: refused naming both.
	var resp ipam.RequestAddressResponse
	code, msg := d.IPAMCall("RequestAddress", ipam.RequestAddressRequest{PoolID: pool.PoolID, Address: "198.18.184.20",
		Options: map[string]string{"com.docker.network.endpoint.name": "fixed"}}, &resp)
	offered := regexp.MustCompile(`198\.18\.184\.1[0-5][0-9]\b`) // the server's range, .100-.150
	if code == 200 || !strings.Contains(msg, "198.18.184.20 ") || !offered.MatchString(msg) {
		t.Fatalf("--ip outside the server's range answered %d %q: want it refused naming the address asked and the one offered", code, msg)
	}

	d.RemoveEndpoint(netID, ep(2))
	wantReleased(t, dns, addr, mac, 1)
	releaseAddr(t, d, pool.PoolID, addr)
	d.DeleteNetwork(netID)
	if ls := dns.Leases(); len(ls) > 0 {
		t.Fatalf("leases left after every release: %v", ls)
	}
}

// nameMAC is what underlay mac prints for name on parent, in the
// daemon's namespace.
func nameMAC(t *testing.T, d *itest.Daemon, parent, name string) string {
	t.Helper()
	cmd := d.Command(nil, "mac", "--parent", parent, name)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("underlay mac --parent %s %s: %v: %s", parent, name, err, errOut.String())
	}
	mac := strings.TrimSpace(out.String())
	if m, err := net.ParseMAC(mac); err != nil || m[0]&3 != 2 {
		t.Fatalf("underlay mac printed %q: want a locally administered unicast MAC", mac)
	}
	return mac
}

// endpointLink is the name of ns's link with mac ("" for none).
func endpointLink(t *testing.T, ns *itest.Netns, mac string) string {
	t.Helper()
	for _, n := range ns.LinkNames() {
		if l := ns.Link(n); l != nil && l.Attrs().HardwareAddr.String() == mac {
			return n
		}
	}
	return ""
}

// wantLease waits until dnsmasq leases addr to mac under host name.
func wantLease(t *testing.T, dns *itest.Dnsmasq, addr, mac, host string) {
	t.Helper()
	l, ok := dns.WaitLease(10*time.Second, netip.MustParseAddr(addr), func(l itest.DnsmasqLease) bool { return l.MAC == mac && l.Hostname == host })
	if !ok {
		t.Fatalf("dnsmasq's lease of %s after 10s: %q; want MAC %s, host name %s", addr, l.Line, mac, host)
	}
}

// wantReleased waits until dnsmasq logged a new release of addr from mac
// (before: the releases it logged until then) and dropped its lease.
func wantReleased(t *testing.T, dns *itest.Dnsmasq, addr, mac string, before int) {
	t.Helper()
	if err := dns.WaitReleased(10*time.Second, netip.MustParseAddr(addr), mac, before); err != nil {
		t.Fatal(err)
	}
}

// waitResolves waits until the LAN's DNS (dnsmasq, on the LAN's server
// address) answers name with addr, asked from the LAN's namespace.
func waitResolves(t *testing.T, far *itest.Netns, server, name, addr string) {
	t.Helper()
	f := far.File()
	defer f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", "busybox", "nslookup", name, server)
		cmd.ExtraFiles = []*os.File{f}
		// busybox asks for A and AAAA and exits 1 when dnsmasq refuses
		// the AAAA one: the answer is what counts.
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "Address: "+addr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the LAN's DNS does not resolve %s to %s after 10s: %v\n%s", name, addr, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The same through a DHCPv6 pool (--ipam-opt dhcpv6=true) against
// dnsmasq's DHCPv6 with its DNS: the name's MAC, the DUID-LL of it and an
// IAID of its last four bytes in dnsmasq's lease, the name (option 39)
// resolved to the address, the same lease after a re-creation.
func TestIPAMDHCPv6IdentityByName(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	lan := itest.NewLAN6(t, ns, "lan6n", netip.MustParsePrefix("2001:db8:64::1/64"))
	srv := &itest.Dnsmasq6{Dnsmasq: itest.StartDnsmasq(t, itest.DnsmasqConfig{NS: lan.Far, Interface: itest.LAN6ServerLink, Dir: t.TempDir(), DNS: true,
		Range: "2001:db8:64::100,2001:db8:64::1ff,64,2m", Extra: []string{"--enable-ra"}, Ready: "DHCPv6, IP range"})}
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
	const netID = "4d4a1c0000000000000000000000000000000000000000000000000000000066"
	var pool ipam.RequestPoolResponse
	d.MustIPAMCall("RequestPool", ipam.RequestPoolRequest{AddressSpace: itest.LocalSpace, Pool: "2001:db8:64::/64", V6: true,
		Options: map[string]string{"parent": "lan6n", "dhcpv6": "true"}}, &pool)
	d.MustRequestAddress(pool.PoolID, "2001:db8:64::1", true)
	d.MustCreateNetwork(itest.Net{ID: netID, Opts: map[string]string{"parent": "lan6n"}, V6: []string{"2001:db8:64::/64,2001:db8:64::1/64"}, Space: itest.LocalSpace})
	mac := nameMAC(t, d, "lan6n", "web6")
	hw, _ := net.ParseMAC(mac)
	ep := func(n int) string { return fmt.Sprintf("f%063d", n) }

	for i := 1; i <= 2; i++ { // a re-creation: the same again
		addr := requestNamed(t, d, pool.PoolID, "web6")
		ce, _ := d.Endpoint(netID, ep(i), "", addr+"/64", "")
		if ce.Interface == nil || ce.Interface.MacAddress != mac || ce.Interface.AddressIPv6 != "" {
			t.Fatalf("CreateEndpoint %d answered %+v: want only MAC %s", i, ce.Interface, mac)
		}
		l, ok := srv.WaitLease6(10*time.Second, netip.MustParseAddr(addr), func(l itest.Dnsmasq6Lease) bool {
			return l.DUID == "00:03:00:01:"+mac && l.Hostname == "web6"
		})
		if want := uint32(hw[2])<<24 | uint32(hw[3])<<16 | uint32(hw[4])<<8 | uint32(hw[5]); !ok || l.IAID != want {
			t.Fatalf("dnsmasq's lease of %s: %q; want the DUID-LL of %s, IAID %d and host name web6", addr, l.Line, mac, want)
		}
		waitResolves(t, lan.Far, "2001:db8:64::1", "web6", addr)
		d.RemoveEndpoint(netID, ep(i))
		if !itest.WaitFor(10*time.Second, func() bool { return strings.Count(srv.Log(), "DHCPRELEASE") == i && len(srv.Leases6()) == 0 }) {
			t.Fatalf("after DeleteEndpoint %d: dnsmasq logged %d releases, leases %v; want %d and none", i, strings.Count(srv.Log(), "DHCPRELEASE"), srv.Leases6(), i)
		}
		releaseAddr(t, d, pool.PoolID, addr)
	}
}
