package integration

// The IPAM on the LAN (issue 25 §2-3) through the real binary: a pool's
// address a LAN host answers for is skipped at RequestAddress, counted and
// probed once (the driver's CreateEndpoint does not probe it again), and
// addresses stick to endpoint names across releases, pool re-creation
// and restarts, never-used addresses first; underlay ls shows the names.

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// arpProbesFor keeps the ARP probes (sender IP 0.0.0.0) for addr.
func arpProbesFor(addr netip.Addr) func([]byte) bool {
	return func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && a.Op == 1 && a.SPA.IsUnspecified() && a.TPA == addr
	}
}

func TestIPAMLANProbeSkipsAddressesTheLANHolds(t *testing.T) {
	// Serial: the LAN's answer must reach the address probe within its budget, the probes are counted in a capture window.
	l := newProbeLAN(t)
	l.host.AddAddr(probeParent, "198.18.7.2/24")
	l.lan.AddAddr(probeLANEnd, "198.18.7.1/24") // the LAN's router, say: answers ARP
	d := itest.StartDaemon(t, l.host, itest.DaemonOptions{Args: []string{"--resolv-conf", resolvConf(t, "# none")}})
	capt := l.capture()
	pool := d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.7.0/24", Options: map[string]string{"parent": probeParent}})

	got := d.MustRequestAddress(pool.PoolID, "", false)
	if got != "198.18.7.3/24" {
		t.Fatalf("RequestAddress answered %s, want 198.18.7.3/24 (.1 answers on the LAN, .2 is the host's)", got)
	}
	parentMAC := l.host.MustLink(probeParent).Attrs().HardwareAddr
	held, free := netip.MustParseAddr("198.18.7.1"), netip.MustParseAddr("198.18.7.3")
	// .1 answered the first probe; .3 got the 3 probes of the budget, from
	// the parent's MAC.
	probes := capt.wantMatches(t, "ARP probes for the handed out 198.18.7.3", 3, arpProbesFor(free))
	for _, f := range probes {
		if a, _ := itest.ReadARP(f.B); !bytes.Equal(a.SHA, parentMAC) {
			t.Errorf("probe from %s, want the parent's MAC %s", a.SHA, parentMAC)
		}
	}
	if n := len(capt.match(arpProbesFor(held))); n < 1 || n > 3 {
		t.Errorf("%d probes for 198.18.7.1, want 1 to 3 (ended by the answer)", n)
	}
	// The driver's CreateEndpoint of that address right after: no probe
	// (the network's default probe is on: its subnet is vp0's LAN).
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": probeParent}, V4: []string{"198.18.7.0/24,198.18.7.1/24"}})
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
		Interface: &network.EndpointInterface{Address: got}}, nil)
	capt.wantMatches(t, "ARP probes for 198.18.7.3 after CreateEndpoint", 3, arpProbesFor(free))
	// While an address the IPAM did not probe is probed by the driver.
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epB,
		Interface: &network.EndpointInterface{Address: "198.18.7.50/24"}}, nil)
	capt.wantMatches(t, "ARP probes for 198.18.7.50 (the driver's)", 3, arpProbesFor(netip.MustParseAddr("198.18.7.50")))

	// Remembered: the next request does not probe .1 again.
	before := len(capt.match(arpProbesFor(held)))
	if got := d.MustRequestAddress(pool.PoolID, "", false); got != "198.18.7.4/24" {
		t.Errorf("second RequestAddress answered %s, want 198.18.7.4/24", got)
	}
	if n := len(capt.match(arpProbesFor(held))); n != before {
		t.Errorf("198.18.7.1 was probed again (%d probes, %d before) while remembered as in use", n, before)
	}
	if v := d.Scrape()["underlay_ipam_probe_conflicts_total"]; v != 1 {
		t.Errorf("underlay_ipam_probe_conflicts_total = %v, want 1", v)
	}
	log := d.Log()
	if n := strings.Count(log, "address in use on the LAN: skipped"); n != 1 || !strings.Contains(log, l.lanMAC.String()) {
		t.Errorf("the skip is logged %d times (want once, naming %s):\n%s", n, l.lanMAC, tailLog(log, 20))
	}

	// More LAN hosts: three conflicts in a row are refused naming them.
	for _, a := range []string{"198.18.7.5/24", "198.18.7.6/24", "198.18.7.7/24"} {
		l.lan.AddAddr(probeLANEnd, a)
	}
	_, code2, msg := d.RequestAddress(pool.PoolID, "", false)
	for _, want := range []string{"198.18.7.5", "198.18.7.6", "198.18.7.7", l.lanMAC.String(), "--aux-address", "address_probe=0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %d %q lacks %q", code2, msg, want)
		}
	}
	if code2 != 409 {
		t.Errorf("three conflicts answered %d, want 409", code2)
	}
}

// requestNamed is RequestAddress with the endpoint's name, as current
// engines send it.
func requestNamed(t *testing.T, d *itest.Daemon, poolID, name string) string {
	t.Helper()
	var resp ipam.RequestAddressResponse
	req := ipam.RequestAddressRequest{PoolID: poolID, Options: map[string]string{"com.docker.network.endpoint.name": name}}
	if code, msg := d.IPAMCall("RequestAddress", req, &resp); msg != "" {
		t.Fatalf("RequestAddress for %s on pool %s answered %d: %s", name, poolID, code, msg)
	}
	return plain(resp.Address)
}

func releaseAddr(t *testing.T, d *itest.Daemon, poolID, addr string) {
	t.Helper()
	d.MustIPAMCall("ReleaseAddress", ipam.ReleaseAddressRequest{PoolID: poolID, Address: addr}, nil)
}

func TestIPAMStickyAddressesByName(t *testing.T) {
	t.Parallel()
	docker := itest.NewFakeDocker(t)
	_, d := ipamSetup(t, "--docker-host", docker.Host())
	const subnet = "198.18.40.0/24"
	pool := d.MustRequestPool(ipam.RequestPoolRequest{Pool: subnet})
	d.MustRequestAddress(pool.PoolID, "", true) // the gateway, .1
	web := requestNamed(t, d, pool.PoolID, "web-1")
	db := requestNamed(t, d, pool.PoolID, "db-1")
	if web != "198.18.40.2" || db != "198.18.40.3" {
		t.Fatalf("web-1 %s, db-1 %s: want .2 and .3", web, db)
	}
	// docker rm -f web-1: its address is kept for it; other names and
	// engines that send no name (20.10) get never-used ones.
	releaseAddr(t, d, pool.PoolID, web)
	if a := requestNamed(t, d, pool.PoolID, "cache-1"); a != "198.18.40.4" {
		t.Errorf("cache-1 got %s, want the never-used 198.18.40.4, not web-1's", a)
	}
	if a := plain(d.MustRequestAddress(pool.PoolID, "", false)); a != "198.18.40.5" {
		t.Errorf("a request without a name got %s, want 198.18.40.5", a)
	}
	if a := requestNamed(t, d, pool.PoolID, "web-1"); a != web {
		t.Errorf("web-1 came back to %s, want its %s", a, web)
	}

	// compose down, a restart, compose up: a new pool of the same subnet.
	for _, a := range []string{web, db, "198.18.40.4", "198.18.40.5", "198.18.40.1"} {
		releaseAddr(t, d, pool.PoolID, a)
	}
	releasePool(t, d, pool.PoolID)
	d.Restart()
	again := d.MustRequestPool(ipam.RequestPoolRequest{Pool: subnet})
	if again.PoolID == pool.PoolID {
		t.Fatalf("the re-created pool has the old ID %s", pool.PoolID)
	}
	d.MustRequestAddress(again.PoolID, "", true)
	if a := requestNamed(t, d, again.PoolID, "new-1"); a != "198.18.40.5" {
		t.Errorf("new-1 on the re-created pool got %s, want 198.18.40.5 (never-used; .2-.4 are remembered)", a)
	}
	for name, want := range map[string]string{"db-1": db, "web-1": web, "cache-1": "198.18.40.4"} {
		if a := requestNamed(t, d, again.PoolID, name); a != want {
			t.Errorf("%s on the re-created pool got %s, want %s", name, a, want)
		}
	}

	// underlay ls: the names, after the pools.
	releaseAddr(t, d, again.PoolID, "198.18.40.4")
	l := lsJSON(t, d, docker.Host())
	got := map[string]stickyName{}
	for _, n := range l.Names {
		got[n.Name] = stickyName{n.Address, n.Held, n.Subnet}
	}
	for name, want := range map[string]stickyName{"web-1": {web, true, subnet}, "db-1": {db, true, subnet},
		"cache-1": {"198.18.40.4", false, subnet}, "new-1": {"198.18.40.5", true, subnet}} {
		if got[name] != want {
			t.Errorf("ls --json names[%s] = %+v, want %+v", name, got[name], want)
		}
	}
	table, _, code := cli(t, "ls", "--socket", d.Socket, "--docker-host", docker.Host())
	i := strings.Index(table, "STICKY NAME")
	if code != 0 || i < 0 || i < strings.Index(table, "POOL  ") || !strings.Contains(table[i:], "cache-1") || !strings.Contains(table[i:], "198.18.40.4") {
		t.Errorf("ls table (exit %d) lacks the sticky names after the pools:\n%s", code, table)
	}
}

type stickyName struct {
	addr   string
	held   bool
	subnet string
}
