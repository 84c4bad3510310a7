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
		Options: map[string]string{"parent": "lan4", "dhcp": "true"}}, &pool)
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
	line := waitLeaseLine(t, dns, addr, func(f []string) bool { return f[1] == mac })
	if f := strings.Fields(line); f[3] != "web" || f[4] != "01:"+mac {
		t.Fatalf("dnsmasq's lease %q: want host name web and client ID 01:%s", line, mac)
	}
	waitResolves(t, lan.Far, "198.18.184.1", "web", addr)

	// docker rm -f web; docker run --name web: the same MAC and address.
	d.RemoveEndpoint(netID, ep(1))
	releaseAddr(t, d, pool.PoolID, addr)
	waitLeaseLine(t, dns, addr, nil) // released at DeleteEndpoint
	again := requestNamed(t, d, pool.PoolID, "web")
	ce, _ = d.Endpoint(netID, ep(2), again+"/24", "", "")
	if again != addr || ce.Interface == nil || ce.Interface.MacAddress != mac {
		t.Fatalf("re-created: %s with %+v; want %s with MAC %s", again, ce.Interface, addr, mac)
	}
	waitLeaseLine(t, dns, addr, func(f []string) bool { return f[1] == mac && f[3] == "web" })

	// Another name: another MAC. --mac-address: refused naming the
	// name's, and the lease is given back at ReleaseAddress.
	db := requestNamed(t, d, pool.PoolID, "db")
	dbMAC := nameMAC(t, d, "lan4", "db")
	if db == addr || dbMAC == mac {
		t.Fatalf("db got %s MAC %s, web %s MAC %s", db, dbMAC, addr, mac)
	}
	waitLeaseLine(t, dns, db, func(f []string) bool { return f[1] == dbMAC && f[3] == "db" })
	msg := d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: ep(3),
		Interface: &network.EndpointInterface{Address: db + "/24", MacAddress: "02:00:00:00:00:01"}}, nil)
	for _, w := range []string{"02:00:00:00:00:01", dbMAC, "underlay mac --parent lan4 db", "drop --mac-address"} {
		if !strings.Contains(msg, w) {
			t.Fatalf("CreateEndpoint with another MAC answered %q: want it refused mentioning %q", msg, w)
		}
	}
	releaseAddr(t, d, pool.PoolID, db)
	waitLeaseLine(t, dns, db, nil)

	// --ip another than the server gives: refused naming both.
	var resp ipam.RequestAddressResponse
	code, msg := d.IPAMCall("RequestAddress", ipam.RequestAddressRequest{PoolID: pool.PoolID, Address: "198.18.184.20",
		Options: map[string]string{"com.docker.network.endpoint.name": "fixed"}}, &resp)
	if code == 200 || !strings.Contains(msg, "198.18.184.20") || !strings.Contains(msg, "198.18.184.1") {
		t.Fatalf("--ip outside the server's range answered %d %q: want it refused naming the address asked and the one offered", code, msg)
	}

	d.RemoveEndpoint(netID, ep(2))
	releaseAddr(t, d, pool.PoolID, addr)
	waitLeaseLine(t, dns, addr, nil)
	d.DeleteNetwork(netID)
	waitNoLeases(t, dns)
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

// waitLeaseLine waits until dnsmasq's lease file has a line of addr for
// which ok holds (its fields), or, with ok nil, none (dnsmasq rewrites the
// file after it answers).
func waitLeaseLine(t *testing.T, dns *itest.Dnsmasq, addr string, ok func([]string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(dns.LeaseFile)
		var found string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 5 && f[2] == addr && (ok == nil || ok(f)) {
				found = line
			}
		}
		switch {
		case ok != nil && found != "":
			return found
		case ok == nil && !strings.Contains(string(b), " "+addr+" "):
			return ""
		case time.Now().After(deadline):
			t.Fatalf("dnsmasq's lease file, after 10s, for %s (want present: %v):\n%s", addr, ok != nil, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitNoLeases waits until dnsmasq's lease file is empty.
func waitNoLeases(t *testing.T, dns *itest.Dnsmasq) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(dns.LeaseFile)
		if strings.TrimSpace(string(b)) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases left behind after 10s:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
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
