package integration

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// The holders no probe sees (issue 33), through the real binary on veth
// LANs: the host's own addresses (Linux does not answer its own probe)
// and this daemon's other endpoints on the parent (their links sit in
// other namespaces). Static and IPAM-given addresses are refused with a
// 409 naming the address, the holder and the fix; DHCP and DHCPv6 offers
// are declined on the wire.

// refused sends a NetworkDriver request that must be refused with 409 and
// returns the error, checked to hold each of want.
func refused(t *testing.T, d *itest.Daemon, route string, req any, want ...string) string {
	t.Helper()
	code, body, err := d.Post("/NetworkDriver."+route, req)
	if err != nil {
		t.Fatalf("%s: %v", route, err)
	}
	var e struct{ Err string }
	_ = json.Unmarshal(body, &e)
	if code != http.StatusConflict {
		t.Fatalf("%s answered %d %s: want 409 naming %q", route, code, body, want)
	}
	for _, w := range want {
		if !strings.Contains(e.Err, w) {
			t.Errorf("%s's refusal %q lacks %q", route, e.Err, w)
		}
	}
	return e.Err
}

// dhcp6Network is a DHCPv6 network on parent with dhcp_timeout 5s.
func dhcp6Network(id, parent string) *network.CreateNetworkRequest {
	r := lan6Network(id, parent, "dhcpv6")
	r.Options["com.docker.network.generic"].(map[string]any)["dhcp_timeout"] = "5s"
	return r
}

// epD is a fourth endpoint.
const epD = "edededededed0000000000000000000000000000000000000000000000000004"

func TestAddressHoldersNoProbeSees(t *testing.T) {
	t.Parallel()
	t.Run("IPv4 the host's address", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: 2 * time.Minute})
		held := netip.MustParseAddr("198.18.180.100") // the server's first offer
		e.ns.AddAddr("lan0", held.String()+"/24")
		// A DHCP offer of it is declined, and the next one taken.
		e.createNetwork(t, netA)
		addr, _, _ := e.createEndpoint(t, netA, epA)
		if addr.Addr() == held {
			t.Fatalf("the DHCP endpoint got %s, the host's own address", addr)
		}
		if !itest.WaitFor(5*time.Second, func() bool { return e.srv.Declined(held) }) {
			t.Fatalf("the server saw no DHCPDECLINE of %s:\n%s", held, e.srv.MessagesString())
		}
		if !e.d.WaitLog(5*time.Second, "this host holds it (on its link lan0)") {
			t.Errorf("the daemon did not log the decline naming the host's link:\n%s", tailLog(e.d.Log(), 20))
		}
		// A static (or Docker IPAM's) address: refused, the probe on.
		e.d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan0"}, V4: []string{"198.18.180.0/24,198.18.180.1/24"}})
		refused(t, e.d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB, Interface: &network.EndpointInterface{Address: held.String() + "/24"}},
			held.String(), "this host holds it (on its link lan0)", "another --ip", "--aux-address host="+held.String())
		e.d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB, Interface: &network.EndpointInterface{Address: "198.18.180.20/24"}}, nil)
		// underlay's IPAM refuses it asked for.
		pool := e.d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.180.0/24", Options: map[string]string{"parent": "lan0"}})
		if _, code, msg := e.d.RequestAddress(pool.PoolID, held.String(), false); code != http.StatusConflict || !strings.Contains(msg, held.String()) || !strings.Contains(msg, "the host's own address") {
			t.Fatalf("underlay's IPAM asked for the host's %s: %d %q, want 409 naming it and the host", held, code, msg)
		}
	})

	t.Run("IPv4 a sibling's lease, both ways", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: 2 * time.Minute})
		e.createNetwork(t, netA)
		leased, _, _ := e.createEndpoint(t, netA, epA)
		// A static network of the same LAN on the same parent is accepted.
		e.d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan0"}, V4: []string{"198.18.180.0/24,198.18.180.1/24"}})
		refused(t, e.d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB, Interface: &network.EndpointInterface{Address: leased.String()}},
			leased.Addr().String(), "endpoint "+epA[:12]+" of network "+netA[:12]+" holds it", "another --ip")
		pool := e.d.MustRequestPool(ipam.RequestPoolRequest{Pool: "198.18.180.0/24", Options: map[string]string{"parent": "lan0"}})
		holder := "endpoint " + epA[:12] + " of network " + netA[:12] + " on parent lan0 holds it"
		if _, code, msg := e.d.RequestAddress(pool.PoolID, leased.Addr().String(), false); code != http.StatusConflict || !strings.Contains(msg, leased.Addr().String()) || !strings.Contains(msg, holder) {
			t.Fatalf("underlay's IPAM asked for %s, which a DHCP endpoint on lan0 leased: %d %q, want 409 naming it and %q", leased.Addr(), code, msg, holder)
		}
		// The reverse: a static endpoint holds the server's next offer,
		// which the next DHCP endpoint declines.
		next := leased.Addr().Next()
		e.d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epC, Interface: &network.EndpointInterface{Address: next.String() + "/24"}}, nil)
		got, _, _ := e.createEndpoint(t, netA, epD)
		if got.Addr() == next {
			t.Fatalf("the DHCP endpoint got %s, which static endpoint %s holds", got, epC[:12])
		}
		if !itest.WaitFor(5*time.Second, func() bool { return e.srv.Declined(next) }) {
			t.Fatalf("the server saw no DHCPDECLINE of %s:\n%s", next, e.srv.MessagesString())
		}
	})

	t.Run("IPv6 the host's address", func(t *testing.T) {
		t.Parallel()
		ns := itest.NewNetns(t)
		lan := itest.NewLAN6(t, ns, "lan6h", netip.MustParsePrefix("2001:db8:66::1/64"))
		srv := lan.ServeDHCPv6("2001:db8:66::100,2001:db8:66::100,64,2m") // one address: the host's
		ns.AddAddr("lan6h", "2001:db8:66::100/64")
		d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
		d.MustCall("CreateNetwork", dhcp6Network(netA, "lan6h"), nil)
		refused(t, d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA, Interface: &network.EndpointInterface{}},
			"2001:db8:66::100", "this host holds it (on its link lan6h)")
		if !itest.WaitFor(5*time.Second, func() bool { return strings.Contains(srv.Log(), "DHCPDECLINE") }) {
			t.Fatalf("dnsmasq saw no Decline of the host's 2001:db8:66::100:\n%s", srv.Log())
		}
		d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan6h"}, V4: []string{"198.18.66.0/24"}, V6: []string{"2001:db8:66::/64,2001:db8:66::1/64"}})
		refused(t, d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB, Interface: &network.EndpointInterface{AddressIPv6: "2001:db8:66::100/64"}},
			"2001:db8:66::100", "this host holds it (on its link lan6h)", "another --ip6")
	})

	t.Run("IPv6 a sibling's lease, both ways", func(t *testing.T) {
		t.Parallel()
		ns := itest.NewNetns(t)
		lan := itest.NewLAN6(t, ns, "lan6s", netip.MustParsePrefix("2001:db8:67::1/64"))
		srv := lan.ServeDHCPv6("2001:db8:67::100,2001:db8:67::101,64,2m") // two addresses
		d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
		d.MustCall("CreateNetwork", dhcp6Network(netA, "lan6s"), nil)
		var ce network.CreateEndpointResponse
		d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA, Interface: &network.EndpointInterface{}}, &ce)
		leased := netip.MustParsePrefix(ce.Interface.AddressIPv6).Addr()
		other := netip.MustParseAddr("2001:db8:67::100")
		if leased == other {
			other = other.Next()
		}
		d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lan6s"}, V4: []string{"198.18.67.0/24"}, V6: []string{"2001:db8:67::/64,2001:db8:67::1/64"}})
		refused(t, d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB, Interface: &network.EndpointInterface{AddressIPv6: leased.String() + "/64"}},
			leased.String(), "endpoint "+epA[:12]+" of network "+netA[:12]+" holds it", "another --ip6")
		// The reverse: a static endpoint takes the range's other address;
		// the server can offer the next DHCPv6 endpoint only that one, which
		// it declines.
		d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epC, Interface: &network.EndpointInterface{AddressIPv6: other.String() + "/64"}}, nil)
		refused(t, d, "CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epD, Interface: &network.EndpointInterface{}},
			other.String(), "endpoint "+epC[:12]+" of network "+netB[:12]+" holds it")
		if !itest.WaitFor(5*time.Second, func() bool { return strings.Contains(srv.Log(), "DHCPDECLINE") }) {
			t.Fatalf("dnsmasq saw no Decline of %s:\n%s", other, srv.Log())
		}
	})
}
