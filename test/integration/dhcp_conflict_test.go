package integration

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// Addresses that are not free, through the real binary (issue 22 §2):
// a rogue server that offers every client the same address, a LAN host
// that holds an offered address (its kernel answers the ARP probe), and a
// static address a LAN host holds.
func TestDHCPOffersThatAreNotFree(t *testing.T) {
	// Serial: a 300 ms address probe must see the LAN host's answer (its subtests run in parallel among themselves).
	itest.RequireRoot(t)
	t.Run("one address offered to everyone", func(t *testing.T) {
		t.Parallel()
		same := netip.MustParseAddr("198.18.180.120")
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease, Offer: same})
		e.createNetwork(t, netA)
		addr, _, _ := e.createEndpoint(t, netA, epA)
		if addr.Addr() != same {
			t.Fatalf("first endpoint got %s, want the rogue offer %s", addr, same)
		}
		msg := e.createRefused(t, netA, epB)
		for _, want := range []string{"conflict", same.String(), "endpoint " + epA[:12] + " of network", "declined"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q lacks %q", msg, want)
			}
		}
		if !e.srv.Declined(same) {
			t.Fatalf("the server saw no DHCPDECLINE of %s:\n%s", same, e.srv.MessagesString())
		}
	})
	t.Run("a LAN host holds the offered address", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease})
		held := netip.MustParseAddr("198.18.180.100") // the pool's first
		srv := e.lan.Far.MustLink(itest.LANServerLink)
		if err := e.lan.Far.NL.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: held.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
		e.createNetwork(t, netA)
		addr, _, _ := e.createEndpoint(t, netA, epA)
		if addr.Addr() == held {
			t.Fatalf("the endpoint got %s, which a LAN host holds", held)
		}
		if !e.srv.Declined(held) {
			t.Fatalf("the server saw no DHCPDECLINE of %s:\n%s", held, e.srv.MessagesString())
		}
		log := e.d.Log()
		if !strings.Contains(log, "declined a DHCP offer that is not free") || !strings.Contains(log, srv.Attrs().HardwareAddr.String()) {
			t.Errorf("the daemon did not log the decline naming the LAN host's MAC %s:\n%s", srv.Attrs().HardwareAddr, tailLog(log, 20))
		}
	})
	t.Run("a static address a LAN host holds", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, nil)
		e.d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan0", "address_probe": "300ms"}, V4: []string{"198.18.180.0/24,198.18.180.254/24"}})
		mac := e.lan.Far.MustLink(itest.LANServerLink).Attrs().HardwareAddr.String()
		msg := e.d.Call("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epA,
			Interface: &network.EndpointInterface{Address: "198.18.180.1/24"}}, nil)
		for _, want := range []string{"198.18.180.1", mac, "another --ip", "--aux-address"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q lacks %q", msg, want)
			}
		}
		var ce network.CreateEndpointResponse
		e.d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB,
			Interface: &network.EndpointInterface{Address: "198.18.180.10/24"}}, &ce)
	})
}
