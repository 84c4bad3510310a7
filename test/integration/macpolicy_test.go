package integration

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
)

// Stable MACs through the real binary: an endpoint that comes back with
// the same address on the same parent — a re-created container, a
// re-created network, a restarted daemon — gets the same MAC; its link in
// the kernel has it and the LAN hears its announcements from it; with
// mac_address_policy=random every endpoint gets a new one.
func TestStableMACThroughTheBinary(t *testing.T) {
	// Serial: the announcements are counted in a capture window.
	l := newProbeLAN(t)
	d := itest.StartDaemon(t, l.host, itest.DaemonOptions{})
	opts := map[string]string{"parent": probeParent, "com.docker.network.advertise_addr_ms": "100", "address_probe": "0"}
	v4 := []string{"198.18.9.0/24,198.18.9.1/24"}
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: opts, V4: v4})

	// endpoint creates and joins epID with addr and returns its MAC, after
	// checking the kernel's link carries it.
	endpoint := func(netID, epID, addr string) net.HardwareAddr {
		t.Helper()
		ce, j := d.Endpoint(netID, epID, addr, "", "")
		mac, err := net.ParseMAC(ce.Interface.MacAddress)
		if err != nil || mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
			t.Fatalf("CreateEndpoint %s answered MAC %q; want a locally administered unicast MAC", epID, ce.Interface.MacAddress)
		}
		if got := l.host.MustLink(j.InterfaceName.SrcName).Attrs().HardwareAddr; !bytes.Equal(got, mac) {
			t.Fatalf("link %s has MAC %s; CreateEndpoint answered %s", j.InterfaceName.SrcName, got, mac)
		}
		return mac
	}
	capt := l.capture()
	first := endpoint(netA, epA, "198.18.9.10/24")
	capt.wantMatches(t, "announcements from the stable MAC", 3, func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && bytes.Equal(a.EthSrc, first) && bytes.Equal(a.SHA, first)
	})
	if other := endpoint(netA, epB, "198.18.9.11/24"); bytes.Equal(other, first) {
		t.Fatalf("198.18.9.10 and 198.18.9.11 got one MAC %s", first)
	}
	d.RemoveEndpoint(netA, epA)
	if again := endpoint(netA, epC, "198.18.9.10/24"); !bytes.Equal(again, first) {
		t.Fatalf("the re-created endpoint of 198.18.9.10 got MAC %s; want %s", again, first)
	}
	d.RemoveEndpoint(netA, epC)
	d.RemoveEndpoint(netA, epB)
	d.DeleteNetwork(netA)
	d.Restart()
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: opts, V4: v4})
	if again := endpoint(netB, epA, "198.18.9.10/24"); !bytes.Equal(again, first) {
		t.Fatalf("198.18.9.10 on the re-created network after a restart got MAC %s; want %s", again, first)
	}
	d.RemoveEndpoint(netB, epA)
	d.DeleteNetwork(netB)

	random := map[string]string{"parent": probeParent, "address_probe": "0", "mac_address_policy": "random"}
	d.MustCreateNetwork(itest.Net{ID: netC, Opts: random, V4: v4})
	r1 := endpoint(netC, epA, "198.18.9.10/24")
	d.RemoveEndpoint(netC, epA)
	r2 := endpoint(netC, epB, "198.18.9.10/24")
	if bytes.Equal(r1, first) || bytes.Equal(r1, r2) {
		t.Fatalf("mac_address_policy=random gave %s then %s (stable: %s); want a new MAC each time", r1, r2, first)
	}

	msg := d.CreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": probeParent, "mac_address_policy": "fixed"}, V4: v4})
	if !strings.Contains(msg, `"fixed"`) || !strings.Contains(msg, "stable, random") {
		t.Fatalf("mac_address_policy=fixed answered %q; want a refusal naming the value and the valid ones", msg)
	}
}
