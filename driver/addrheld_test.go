package driver

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/netlinkutil/kernel"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/internal/probeopt"
)

// holdersFixture is a daemon with DHCP and DHCPv6 clients on lan0, the
// probe off (address_probe=0 on every network: only the holders no probe
// sees are checked), and the host holding 198.18.2.100 and 2001:db8:2::100
// on lan0.
func holdersFixture(t *testing.T) (*fixture, *fakeLeases, *fakeLeases6) {
	f, fl6 := lan6Fixture(t)
	fl := &fakeLeases{now: f.clock.Now, byClient: map[string]string{}}
	f.d.leases.V4.Family = leases.DHCP{Client: fl}
	f.k.AddHostAddr("lan0", netip.MustParseAddr("198.18.2.100"))
	f.k.AddHostAddr("lan0", netip.MustParseAddr("2001:db8:2::100"))
	return f, fl, fl6
}

func (f *fixture) endpoint6(netID, epID, addr6, mac string) (*network.CreateEndpointResponse, error) {
	return f.d.CreateEndpoint(context.Background(), &network.CreateEndpointRequest{
		NetworkID: netID, EndpointID: epID, Interface: &network.EndpointInterface{AddressIPv6: addr6, MacAddress: mac}})
}

// The host's own addresses are refused to static (or IPAM-given) endpoints
// in both families, naming the host's link and the fix; an address of the
// subnet the host does not hold is taken.
func TestHostAddressIsRefused(t *testing.T) {
	f, _, _ := holdersFixture(t)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "lan0", probeopt.Name: "0"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}, V6: []string{"2001:db8:2::/64,2001:db8:2::1/64"}})
	_, err := f.endpoint(netB, epA, "198.18.2.100/24", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.2.100", "this host holds it (on its link lan0)", "another --ip", "--aux-address host=198.18.2.100")
	_, err = f.endpoint6(netB, epA, "2001:db8:2::100/64", "")
	wantErr(t, err, pluginapi.ErrConflict, "2001:db8:2::100", "this host holds it (on its link lan0)", "another --ip6")
	if _, ok, _ := f.endpointRecord(netB, epA); ok {
		t.Fatal("a refused endpoint was recorded")
	}
	if _, err := f.endpoint(netB, epA, "198.18.2.101/24", ""); err != nil {
		t.Fatalf("an address the host does not hold: %v", err)
	}
	if got := f.k.Calls("ownaddr"); got != 3 {
		t.Fatalf("%d host address lookups for three endpoints of one address each, want 3", got)
	}
}

// Offers of the host's own addresses are declined (DHCPDECLINE, DHCPv6
// Decline) and others taken.
func TestHostAddressOffersAreDeclined(t *testing.T) {
	f, fl, fl6 := holdersFixture(t)
	f.k.AddHostAddr("lan0", netip.MustParseAddr("198.18.180.100"))   // the DHCP fake's first offer
	f.k.AddHostAddr("lan0", netip.MustParseAddr("2001:db8:60::100")) // the DHCPv6 fake's
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	r, err := f.endpoint(netA, epA, "", "")
	if err != nil || r.Interface == nil || r.Interface.Address != "198.18.180.101/24" {
		t.Fatalf("DHCP endpoint: %+v, %v: want .100 (the host's) declined, .101", r, err)
	}
	if strings.Join(fl.declined, ",") != "198.18.180.100/24" {
		t.Fatalf("declined %v, want the host's 198.18.180.100", fl.declined)
	}
	if err := f.d.CreateNetwork(ctx, lan6Net(netC, "dhcpv6", probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	r, err = f.endpoint(netC, epB, "", "52:54:00:00:00:02")
	if err != nil || r.Interface == nil || r.Interface.AddressIPv6 == "2001:db8:60::100/128" || len(fl6.declined) != 1 || fl6.declined[0] != netip.MustParseAddr("2001:db8:60::100") {
		t.Fatalf("DHCPv6 endpoint: %+v, %v, declined %v: want the host's 2001:db8:60::100 declined and another address", r, err, fl6.declined)
	}
}

// A static endpoint never takes an address a sibling DHCP or DHCPv6
// endpoint of another network on the same parent leased, nor the reverse;
// on another parent the same address is another LAN's.
func TestSiblingEndpointsNeverShareAnAddress(t *testing.T) {
	f, fl, fl6 := holdersFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	if err := f.d.CreateNetwork(ctx, lan6Net(netC, "dhcpv6", probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	// The static network of the same LAN on the same parent is accepted.
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "lan0", probeopt.Name: "0"}, V4: []string{"198.18.180.0/24,198.18.180.1/24"}, V6: []string{"2001:db8:60::/64,2001:db8:60::1/64"}})
	r, err := f.endpoint(netA, epA, "", "")
	if err != nil || r.Interface.Address != "198.18.180.100/24" {
		t.Fatalf("DHCP endpoint: %+v, %v", r, err)
	}
	r, err = f.endpoint(netC, epB, "", "52:54:00:00:00:02")
	if err != nil || r.Interface.AddressIPv6 != "2001:db8:60::100/128" {
		t.Fatalf("DHCPv6 endpoint: %+v, %v", r, err)
	}
	_, err = f.endpoint(netB, epC, "198.18.180.100/24", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.180.100", "endpoint "+dockerid.Short(epA)+" of network "+dockerid.Short(netA)+" holds it", "another --ip")
	_, err = f.endpoint6(netB, epC, "2001:db8:60::100/64", "")
	wantErr(t, err, pluginapi.ErrConflict, "2001:db8:60::100", "endpoint "+dockerid.Short(epB)+" of network "+dockerid.Short(netC)+" holds it", "another --ip6")
	// The reverse: static endpoints first, then the offers of their
	// addresses are declined.
	if _, err := f.endpoint(netB, epC, "198.18.180.101/24", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.endpoint6(netB, epD, "2001:db8:60::101/64", ""); err != nil {
		t.Fatal(err)
	}
	r, err = f.endpoint(netA, epE, "", "")
	if err != nil || r.Interface.Address != "198.18.180.102/24" || strings.Join(fl.declined, ",") != "198.18.180.101/24" {
		t.Fatalf("DHCP endpoint after a static one took .101: %+v, %v, declined %v: want .101 declined, .102", r, err, fl.declined)
	}
	r, err = f.endpoint(netC, epF, "", "52:54:00:00:00:06")
	if err != nil || r.Interface.AddressIPv6 == "2001:db8:60::101/128" || len(fl6.declined) != 1 {
		t.Fatalf("DHCPv6 endpoint after a static one took ::101: %+v, %v, declined %v: want ::101 declined", r, err, fl6.declined)
	}
	// Another parent is another LAN: the same address is free there.
	f.k.AddLink(kernel.Link{Name: "lan1", Kind: "device", MTU: 1500, MAC: "02:00:00:00:00:ab"})
	f.mustCreate(netReq{ID: netD4, Opts: map[string]string{"parent": "lan1", probeopt.Name: "0"}, V4: []string{"198.18.180.0/24,198.18.180.1/24"}})
	const epG = "7777777777770000000000000000000000000000000000000000000000000007"
	if _, err := f.endpoint(netD4, epG, "198.18.180.100/24", ""); err != nil {
		t.Fatalf("198.18.180.100 on another parent: %v", err)
	}
}

// Two creates of one address at once, as two static endpoints of a network
// or a static endpoint beside a DHCP endpoint offered it on the same
// parent: exactly one takes it, the other is refused naming it.
func TestConcurrentCreatesOfOneAddress(t *testing.T) {
	f, fl, _ := holdersFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "lan0", probeopt.Name: "0"}, V4: []string{"198.18.180.0/24,198.18.180.1/24"}})
	fl.mu.Lock()
	fl.same = "198.18.180.50/24"
	fl.mu.Unlock()
	for round := 0; round < 20; round++ {
		creates := []func() error{
			func() error { _, err := f.endpoint(netB, epE, "198.18.180.50/24", ""); return err },
			func() error { _, err := f.endpoint(netB, epF, "198.18.180.50/24", ""); return err },
		}
		if round%2 == 1 {
			creates[1] = func() error { _, err := f.endpoint(netA, epF, "", ""); return err }
		}
		errs := make(chan error, 2)
		for _, create := range creates {
			go func() { errs <- create() }()
		}
		var failed []error
		for range 2 {
			if err := <-errs; err != nil {
				failed = append(failed, err)
			}
		}
		if len(failed) != 1 {
			t.Fatalf("round %d: %d of two concurrent creates of 198.18.180.50 failed (%v), want 1", round, len(failed), failed)
		}
		wantErr(t, failed[0], pluginapi.ErrConflict, "198.18.180.50")
		for _, n := range []string{netA, netB} {
			for _, ep := range []string{epE, epF} {
				_ = f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: n, EndpointID: ep})
			}
		}
	}
}

// The link-local address of a SLAAC endpoint is formed from its MAC: one
// that makes it the parent's own link-local is refused, naming the fix.
func TestSLAACLinkLocalOfTheHostIsRefused(t *testing.T) {
	f, _, _ := holdersFixture(t)
	f.k.AddHostAddr("lan0", netip.MustParseAddr("fe80::5054:ff:fe12:3456"))
	if err := f.d.CreateNetwork(context.Background(), lan6Net(netA, "slaac", probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	_, err := f.endpoint(netA, epA, "", "52:54:00:12:34:56")
	wantErr(t, err, pluginapi.ErrConflict, "fe80::5054:ff:fe12:3456", "lan0", "--mac-address")
	if _, err := f.endpoint(netA, epA, "", "52:54:00:12:34:57"); err != nil {
		t.Fatalf("another MAC: %v", err)
	}
}

// An internal network without a parent sits on a dummy link of its own:
// the host's addresses on its other links are no holders there.
func TestInternalNetworkIgnoresTheHostsAddresses(t *testing.T) {
	f, _, _ := holdersFixture(t)
	f.mustCreate(netReq{ID: netC, Internal: true, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	if _, err := f.endpoint(netC, epA, "198.18.2.100/24", ""); err != nil {
		t.Fatalf("an internal network's endpoint with an address the host holds on lan0: %v", err)
	}
}

// An offer that cannot be checked (the route lookup fails) is given back
// to the server, not kept bound to a client that never uses it.
func TestDHCPOfferThatCannotBeCheckedIsReleased(t *testing.T) {
	f, fl, _ := holdersFixture(t)
	if err := f.d.CreateNetwork(context.Background(), dhcpNet(netA, probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	f.k.SetFault(func(op, name string) error {
		if op == "ownaddr" {
			return errors.New("netlink: no buffer space")
		}
		return nil
	})
	_, err := f.endpoint(netA, epA, "", "")
	if err == nil || !strings.Contains(err.Error(), "198.18.180.100") {
		t.Fatalf("CreateEndpoint with the check failing: %v, want an error naming the offer 198.18.180.100", err)
	}
	if strings.Join(fl.released, ",") != "198.18.180.100/24" {
		t.Fatalf("released %v, want the offer that could not be checked given back", fl.released)
	}
}

// A SLAAC endpoint whose link-local address another create claims is told
// to change its MAC, not its --ip6 (SLAAC networks take none).
func TestSLAACLinkLocalClaimedNamesTheMAC(t *testing.T) {
	f, _, _ := holdersFixture(t)
	if err := f.d.CreateNetwork(context.Background(), lan6Net(netA, "slaac", probeopt.Name, "0")); err != nil {
		t.Fatal(err)
	}
	f.d.claims.Claim("lan0", netip.MustParseAddr("fe80::5054:ff:fe12:3456"), epB)
	_, err := f.endpoint(netA, epA, "", "52:54:00:12:34:56")
	wantErr(t, err, pluginapi.ErrConflict, "fe80::5054:ff:fe12:3456", "--mac-address")
}
