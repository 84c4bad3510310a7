//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// A good citizen of the LAN (issue 25), seen from the LAN: a captured peer
// link (vpN-p, the other end of the parent) sees a container's
// announcements after `docker run` — sent by the engine where it announces
// (current engines), by underlay where it does not (20.10), three either
// way — and a static --ip a LAN host answers for is refused with a message
// naming the address, the host's MAC and the fix.
//
// Parents: vp18 (announcements), vp19 (a LAN host holding an address),
// vp20 (containers that come back).

// containerMAC reads a container's MAC on a network from docker inspect.
func (e *env) containerMAC(t *testing.T, name, netName string) net.HardwareAddr {
	t.Helper()
	_, mac := e.containerOn(t, name, netName)
	return mac
}

// containerOn reads a container's address and MAC on a network from
// docker inspect.
func (e *env) containerOn(t *testing.T, name, netName string) (netip.Addr, net.HardwareAddr) {
	t.Helper()
	out := e.must(t, "inspect", "-f", "{{json .NetworkSettings.Networks}}", name)
	var nets map[string]struct{ MacAddress, IPAddress string }
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		t.Fatalf("docker inspect %s: %v: %s", name, err, out)
	}
	mac, err := net.ParseMAC(nets[netName].MacAddress)
	if err != nil {
		t.Fatalf("docker inspect %s shows MAC %q on %s", name, nets[netName].MacAddress, netName)
	}
	addr, err := netip.ParseAddr(nets[netName].IPAddress)
	if err != nil {
		t.Fatalf("docker inspect %s shows address %q on %s", name, nets[netName].IPAddress, netName)
	}
	return addr, mac
}

// TestLANAnnouncements: after docker run, the LAN sees exactly three
// gratuitous ARP requests for the container's address from its MAC,
// advertise_addr_ms apart.
func TestLANAnnouncements(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	lan := itest.AttachNetns(t, nsPath)
	capt := itest.StartCapture(t, lan, "vp18-p")
	e.network(t, "n11a", "-d", plugin, "--subnet", "198.18.19.0/24", "--gateway", "198.18.19.1", "-o", "parent=vp18",
		"-o", "com.docker.network.advertise_addr_ms=200")
	ip := netip.MustParseAddr("198.18.19.10")
	e.run(t, ctr{name: "c11a", ip: ip.String()}, "n11a")
	mac := e.containerMAC(t, "c11a", "n11a")
	sender := "underlay"
	if engine.announces() {
		sender = "the engine"
	}
	t.Logf("%s: the announcements come from %s", engine, sender)
	arps := capt.WantMatches(t, "gratuitous ARP requests for "+ip.String()+" from "+mac.String(), 3, 5*time.Second, func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && a.Op == 1 && bytes.Equal(a.EthSrc, mac) && bytes.Equal(a.SHA, mac) && a.SPA == ip && a.TPA == ip
	})
	for i := 1; i < len(arps); i++ {
		if d := arps[i].At.Sub(arps[i-1].At); d < 100*time.Millisecond || d > 600*time.Millisecond {
			t.Errorf("%s: announcement %d came %s after the one before; want about 200 ms (advertise_addr_ms=200)", engine, i+1, d)
		}
	}
}

// TestLANStaticAddressHeld: a LAN host (a macvlan of vp19's peer, in a
// namespace of its own) holds 198.18.20.50; docker run --ip 198.18.20.50 is
// refused naming the address, the host's MAC and the fix, and --ip
// 198.18.20.51 runs. (The address on vp19's peer itself would be in
// dockerd's namespace: the host's own, which the driver refuses before any
// probe, naming the link instead of a MAC.)
func TestLANStaticAddressHeld(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	held := "198.18.20.50"
	e2e := itest.AttachNetns(t, nsPath)
	if err := e2e.NL.LinkAdd(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "vp19-h", ParentIndex: e2e.MustLink("vp19-p").Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}); err != nil {
		t.Fatalf("add the LAN host's link on vp19-p: %v", err)
	}
	lanHost := itest.NewNetns(t)
	peer := e2e.MoveLink("vp19-h", lanHost, "lan0").Attrs().HardwareAddr
	lanHost.Up("lan0")
	lanHost.AddAddr("lan0", held+"/24")
	e.network(t, "n11b", "-d", plugin, "--subnet", "198.18.20.0/24", "--gateway", "198.18.20.1", "-o", "parent=vp19",
		"-o", "address_probe=300ms")
	out, err := e.docker("run", "-d", "--stop-timeout", "1", "--name", "c11b", "--network", "n11b", "--ip", held, imageTag, "sleep", "86400")
	_, _ = e.docker("rm", "-f", "c11b")
	if err == nil {
		t.Fatalf("%s: docker run --ip %s started while a LAN host holds it", engine, held)
	}
	for _, want := range []string{held, peer.String(), "another --ip", "--aux-address", "address_probe=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: docker run --ip %s said %q; want it to name %q", engine, held, out, want)
		}
	}
	e.run(t, ctr{name: "c11c", ip: "198.18.20.51"}, "n11b")
}

// TestLANComesBack: with --ipam-driver underlay and no --ip, a container
// re-created under its name (docker rm -f c && docker run --name c …) and
// after its network was re-created gets its address back on engines that
// send the endpoint's name in RequestAddress (the current one), while
// other containers get never-used addresses first; the address brings its
// stable MAC with it on every engine. On 20.10 (no names) addresses are
// handed out lowest-first: the re-created container gets the lowest free
// one.
func TestLANComesBack(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	const netName = "n11c"
	create := func() {
		e.network(t, netName, "-d", plugin, "--ipam-driver", plugin, "--subnet", "198.18.21.0/24", "-o", "parent=vp20")
	}
	create()
	e.run(t, ctr{name: "c11d"}, netName)
	addr, mac := e.containerOn(t, "c11d", netName)
	e.run(t, ctr{name: "c11e"}, netName)
	e.must(t, "rm", "-f", "c11d")
	e.run(t, ctr{name: "c11f"}, netName)
	other, _ := e.containerOn(t, "c11f", netName)
	names := engine.sendsEndpointName()
	t.Logf("%s sends endpoint names: %v; c11d had %s (%s), c11f got %s", engine, names, addr, mac, other)
	if names && other == addr {
		t.Errorf("%s: c11f got %s, c11d's address, while never-used ones are left", engine, other)
	}
	if !names && other != addr {
		t.Errorf("%s: c11f got %s; want %s, the lowest free address (no names on this engine)", engine, other, addr)
	}
	e.run(t, ctr{name: "c11d"}, netName)
	again, againMAC := e.containerOn(t, "c11d", netName)
	if names && (again != addr || !bytes.Equal(againMAC, mac)) {
		t.Errorf("%s: re-created c11d has %s (%s); want its address and MAC back: %s (%s)", engine, again, againMAC, addr, mac)
	}
	if !names && again == addr {
		t.Errorf("%s: re-created c11d has %s, c11f's address", engine, again)
	}
	// The same address means the same MAC, whoever has it.
	if _, m := e.containerOn(t, "c11f", netName); !names && !bytes.Equal(m, mac) {
		t.Errorf("%s: c11f has %s with MAC %s; c11d had it with %s (stable MAC)", engine, other, m, mac)
	}
	if !names {
		return
	}
	// compose down / up: the network is re-created.
	for _, c := range []string{"c11d", "c11e", "c11f"} {
		e.must(t, "rm", "-f", c)
	}
	e.must(t, "network", "rm", netName)
	create()
	e.run(t, ctr{name: "c11e"}, netName)
	e.run(t, ctr{name: "c11d"}, netName)
	if a, m := e.containerOn(t, "c11d", netName); a != addr || !bytes.Equal(m, mac) {
		t.Errorf("%s: c11d on the re-created network has %s (%s); want %s (%s)", engine, a, m, addr, mac)
	}
}
