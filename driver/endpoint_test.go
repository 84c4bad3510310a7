package driver

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

func TestCreateEndpointAnswersOnlyWhatDockerLeftEmpty(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	resp, err := f.endpoint(netA, epA, "198.18.1.10/24", "")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface == nil || resp.Interface.Address != "" || resp.Interface.AddressIPv6 != "" {
		t.Fatalf("answer %+v echoes addresses or has no MAC", resp.Interface)
	}
	mac, err := net.ParseMAC(resp.Interface.MacAddress)
	if err != nil || mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
		t.Fatalf("generated MAC %q is not a locally administered unicast MAC", resp.Interface.MacAddress)
	}
	// Asked again (Docker retrying), the same MAC comes back.
	again, err := f.endpoint(netA, epA, "198.18.1.10/24", "")
	if err != nil || again.Interface.MacAddress != resp.Interface.MacAddress {
		t.Fatalf("second CreateEndpoint answered %+v, %v; want the same MAC", again.Interface, err)
	}

	given, err := f.endpoint(netA, epB, "198.18.1.11/24", "02:42:c6:12:01:0b")
	if err != nil {
		t.Fatal(err)
	}
	if given.Interface != nil {
		t.Fatalf("answered %+v when Docker gave the MAC, want nothing", given.Interface)
	}
	link := f.mustEndpoint(netA, epB, "198.18.1.11/24")
	if l, _ := f.k.Link(link); l.MAC != "02:42:c6:12:01:0b" {
		t.Fatalf("link MAC %q, want the one Docker gave", l.MAC)
	}
}

func TestCreateEndpointRefusals(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "type": "ipvlan"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.2.0/24"}})
	_, err := f.endpoint(netA, epA, "198.18.1.10/24", "02:42:c6:12:01:0a")
	wantErr(t, err, pluginapi.ErrInvalid, "02:42:c6:12:01:0a", "ipvlan", "--mac-address")
	_, err = f.endpoint(netB, epA, "", "01:00:5e:00:00:01")
	wantErr(t, err, pluginapi.ErrInvalid, "multicast")
	_, err = f.endpoint(netB, epA, "", "zz")
	wantErr(t, err, pluginapi.ErrInvalid, `"zz"`)
	_, err = f.endpoint(netB, epA, "198.18.2.300/24", "")
	wantErr(t, err, pluginapi.ErrInvalid, "198.18.2.300/24")
	_, err = f.endpoint(netC, epA, "", "")
	wantErr(t, err, pluginapi.ErrNotFound, "cccccccccccc")
	_, err = f.join(netB, epB)
	wantErr(t, err, pluginapi.ErrNotFound, "ebebebebebeb")
}

func TestJoinCreatesLinkAndAnswersRoutes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     map[string]string
		internal bool
		gw, gw6  string
		routes   []string
	}{
		{name: "macvlan", opts: map[string]string{"parent": "eth1", "mtu": "9000"}, gw: "198.18.1.1", gw6: "2001:db8:1::1"},
		{name: "macvlan private", opts: map[string]string{"parent": "eth1", "macvlan_mode": "private"}, gw: "198.18.1.1", gw6: "2001:db8:1::1"},
		{name: "ipvlan l2", opts: map[string]string{"parent": "eth1", "type": "ipvlan"}, gw: "198.18.1.1", gw6: "2001:db8:1::1"},
		{name: "ipvlan l3", opts: map[string]string{"parent": "eth1", "ipvlan_mode": "l3", "ipvlan_flag": "private"}, routes: []string{"0.0.0.0/0", "::/0"}},
		{name: "ipvlan l3s", opts: map[string]string{"parent": "eth1", "ipvlan_mode": "l3s", "ipvlan_flag": "vepa"}, routes: []string{"0.0.0.0/0", "::/0"}},
		{name: "internal", opts: map[string]string{"parent": "eth1"}, internal: true},
		{name: "internal ipvlan l3", opts: map[string]string{"ipvlan_mode": "l3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.mustCreate(netReq{ID: netA, Opts: tc.opts, Internal: tc.internal, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}})
			if _, err := f.d.CreateEndpoint(context.Background(), &network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
				Interface: &network.EndpointInterface{Address: "198.18.1.10/24", AddressIPv6: "2001:db8:1::10/64"}}); err != nil {
				t.Fatal(err)
			}
			resp, err := f.join(netA, epA)
			if err != nil {
				t.Fatal(err)
			}
			if resp.InterfaceName.SrcName != "uleeaeaeaeaeaea" || resp.InterfaceName.DstPrefix != "eth" || !resp.DisableGatewayService {
				t.Fatalf("join answer %+v", resp)
			}
			if resp.Gateway != tc.gw || resp.GatewayIPv6 != tc.gw6 {
				t.Fatalf("gateways %q %q, want %q %q", resp.Gateway, resp.GatewayIPv6, tc.gw, tc.gw6)
			}
			if len(resp.StaticRoutes) != len(tc.routes) {
				t.Fatalf("routes %+v, want %v", resp.StaticRoutes, tc.routes)
			}
			for i, r := range resp.StaticRoutes {
				if r.Destination != tc.routes[i] || r.RouteType != 1 || r.NextHop != "" {
					t.Fatalf("route %+v, want connected %s without next hop", r, tc.routes[i])
				}
			}
			n, _ := f.record(netA)
			l, ok := f.k.Link("uleeaeaeaeaeaea")
			if !ok || l.Kind != n.Type || l.Mode != n.Mode || l.Flag != n.Flag || f.k.Parent(l.Name) != n.Parent {
				t.Fatalf("link %+v on %s, want %s %s/%s on %s", l, f.k.Parent(l.Name), n.Type, n.Mode, n.Flag, n.Parent)
			}
			if want := n.MTU; want != 0 && l.MTU != want {
				t.Fatalf("link MTU %d, want %d", l.MTU, want)
			}
			// Join again (Docker retrying after a lost answer): one link, no error.
			if _, err := f.join(netA, epA); err != nil {
				t.Fatalf("second Join: %v", err)
			}
			ctx := context.Background()
			if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.k.Link("uleeaeaeaeaeaea"); ok {
				t.Fatal("link survived Leave in the host namespace")
			}
			if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
				t.Fatal(err)
			}
			if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
				t.Fatal(err)
			}
			f.wantLinks()
			f.wantNetworks()
		})
	}
}

func TestJoinRestoresVanishedOwnedParent(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	if _, err := f.endpoint(netA, epA, "198.18.1.10/24", ""); err != nil {
		t.Fatal(err)
	}
	f.k.Remove("eth0.10")
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("Join with the VLAN gone: %v", err)
	}
	f.wantLinks("eth0.10", "uleeaeaeaeaeaea")
}

func TestDeleteEndpointOfUnknownRecordRemovesItsLink(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A link with epB's name and underlay's mark but no record (the record
	// was lost).
	stray := config.EndpointLinkName(epB)
	if err := f.k.AddEndpoint(ctx, kernel.Endpoint{Name: stray, Parent: "eth0", Type: "macvlan", Mode: "bridge", Mark: f.d.mark}); err != nil {
		t.Fatal(err)
	}
	// A host link that merely has the name form is never touched, nor is a
	// macvlan of the name form without underlay's mark, or with another
	// instance's.
	f.k.AddHostLink(config.EndpointLinkName(epA), "veth", 1500)
	unmarked, foreign := config.EndpointLinkName(epC), config.EndpointLinkName(netC)
	if err := f.k.AddEndpoint(ctx, kernel.Endpoint{Name: unmarked, Parent: "eth1", Type: "macvlan", Mode: "bridge"}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.AddEndpoint(ctx, kernel.Endpoint{Name: foreign, Parent: "eth1", Type: "macvlan", Mode: "bridge", Mark: kernel.Mark("another")}); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{epA, epB, epC, netC} {
		if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep}); err != nil {
			t.Fatal(err)
		}
	}
	f.wantLinks(config.EndpointLinkName(epA), unmarked, foreign)
}

// libnetwork moves a joined endpoint's link into the container. A second
// Join then must not make a second link with the same MAC on the wire.
func TestSecondJoinWhileTheLinkIsInASandboxIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.k.Remove(link) // moved into the sandbox: gone from the host namespace
	_, err := f.join(netA, epA)
	wantErr(t, err, pluginapi.ErrConflict, "already joined", "/var/run/docker/netns/x", link, "leave it first")
	f.wantLinks()
	// A link still in the host namespace (Docker never moved it) is
	// replaced as before.
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("Join after Leave: %v", err)
	}
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("a second Join while the link is still in the host namespace: %v", err)
	}
	f.wantLinks(link)
	// After a reboot every sandbox is gone: the join is over.
	f.k.Remove(link)
	f.boot = "boot-2"
	f.restart()
	if _, err := f.join(netA, epA); err != nil {
		t.Fatalf("Join after a reboot: %v", err)
	}
	f.wantLinks(link)
}

// Every link underlay creates carries its mark.
func TestCreatedLinksCarryTheMark(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustCreate(netReq{ID: netB, V4: []string{"198.18.2.0/24"}})
	a := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	b := f.mustEndpoint(netB, epB, "198.18.2.10/24")
	for _, name := range []string{"eth0.10", config.DummyName(netB), a, b} {
		if l, _ := f.k.Link(name); l.Alias != f.d.mark || !strings.HasPrefix(l.Alias, "underlay:") || len(l.Alias) < len("underlay:")+8 {
			t.Errorf("link %s carries alias %q, want the mark %q", name, l.Alias, f.d.mark)
		}
	}
}

func TestRandomMAC(t *testing.T) {
	if !strings.HasPrefix(lanmac.Random().String(), "") || lanmac.Random()[0]&3 != 2 {
		t.Fatal("random MAC is not locally administered unicast")
	}
}
