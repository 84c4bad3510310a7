package integration

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// Announcements through the real binary: after Join, the LAN sees the
// endpoint's gratuitous ARP requests (sender IP = target IP, from its MAC)
// and unsolicited Neighbour Advertisements (override flag), count and
// interval as Docker's options say; on a network an engine that announces
// created (com.docker.network.enable_ipv4 in CreateNetwork), none.
func TestAnnouncementsThroughTheBinary(t *testing.T) {
	// Serial: its assertions are timing bounds (Join under 1 s, the spacing of the announcements).
	l := newProbeLAN(t)
	d := itest.StartDaemon(t, l.host, itest.DaemonOptions{})
	capt := l.capture()
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": probeParent, "com.docker.network.advertise_addr_ms": "250"},
		V4: []string{"198.18.7.0/24,198.18.7.1/24"}, V6: []string{"2001:db8:7::/64,2001:db8:7::1/64"}})
	v4, v6 := netip.MustParseAddr("198.18.7.10"), netip.MustParseAddr("2001:db8:7::10")
	var ce network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
		Interface: &network.EndpointInterface{Address: v4.String() + "/24", AddressIPv6: v6.String() + "/64"}}, &ce)
	mac, err := net.ParseMAC(ce.Interface.MacAddress)
	if err != nil {
		t.Fatalf("CreateEndpoint answered MAC %q", ce.Interface.MacAddress)
	}
	d.MustCall("Join", network.JoinRequest{NetworkID: netA, EndpointID: epA, SandboxKey: "/var/run/docker/netns/x"}, nil)
	joined := time.Now()
	arps := capt.wantMatches(t, "gratuitous ARP requests", 3, func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && bytes.Equal(a.EthSrc, mac) && a.Op == 1 && a.SPA == v4 && a.TPA == v4 && bytes.Equal(a.SHA, mac)
	})
	// The announcements do not delay the Join: its answer is back before
	// the last of them is on the LAN, 800 ms after the first could be. An
	// order, not a duration: in the emulated arm64 VM, on a loaded host, a
	// Join alone once took a second.
	if last := arps[len(arps)-1].At; !joined.Before(last) {
		t.Errorf("Join answered at %s, after the last announcement at %s: announcements must not delay it",
			joined.Format("15:04:05.000"), last.Format("15:04:05.000"))
	}
	wantSpacing(t, "announcement", arps, 125*time.Millisecond, 750*time.Millisecond)
	capt.wantMatches(t, "unsolicited Neighbour Advertisements", 3, func(b []byte) bool {
		n, ok := itest.ReadNDP(b)
		return ok && n.Type == 136 && n.Flags&0x20 != 0 && n.Flags&0x40 == 0 && n.Target == v6 && bytes.Equal(n.OptMAC, mac) && n.HopLimit == 255
	})

	// The engine announces: underlay sends nothing.
	req := itest.Net{ID: netB, Opts: map[string]string{"parent": probeParent}, V4: []string{"198.18.8.0/24,198.18.8.1/24"}}.Request()
	req.Options["com.docker.network.enable_ipv4"] = true
	d.MustCall("CreateNetwork", req, nil)
	var ce2 network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB,
		Interface: &network.EndpointInterface{Address: "198.18.8.10/24"}}, &ce2)
	d.MustCall("Join", network.JoinRequest{NetworkID: netB, EndpointID: epB, SandboxKey: "/var/run/docker/netns/y"}, nil)
	mac2, _ := net.ParseMAC(ce2.Interface.MacAddress)
	time.Sleep(1500 * time.Millisecond)
	if n := len(capt.match(func(b []byte) bool { a, ok := itest.ReadARP(b); return ok && bytes.Equal(a.EthSrc, mac2) })); n != 0 {
		t.Fatalf("underlay sent %d ARP frames for an endpoint of a network whose engine announces", n)
	}
}
