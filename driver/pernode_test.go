package driver

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// An internal network's endpoint reports no parent_option: it has none.
func TestEndpointInfoOfInternalNetwork(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Internal: true})
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	f.mustEndpoint(netA, ep1, "198.18.1.10/24")
	info, err := f.d.EndpointInfo(context.Background(), &network.InfoRequest{NetworkID: netA, EndpointID: ep1})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := info.Value["parent_option"]; ok || info.Value["parent"] != config.DummyName(netA) {
		t.Errorf("EndpointInfo = %v: want the dummy as parent and no parent_option (got %q)", info.Value, v)
	}
}

const netD4 = "dddddddddddd0000000000000000000000000000000000000000000000000004"

// routeList is a fixed RouteLister.
type routeList []kernel.Route

func (r routeList) Routes(context.Context) ([]kernel.Route, error) { return r, nil }
func (r routeList) RoutesVia(_ context.Context, index int) ([]kernel.Route, error) {
	var out []kernel.Route
	for _, x := range r {
		if x.LinkIndex == index {
			out = append(out, x)
		}
	}
	return out, nil
}

// A network that comes back (same ID, same options) follows its per-node
// parent option to the link it resolves to now, unless a container still
// runs on its old link, which still exists.
func TestPerNodeParentFollowsTheHost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" || n.Options[config.OptParent] != "lana,eth0" {
		t.Fatalf("record: link %s, option %q; want eth0 and the option as asked", n.Parent, n.Options[config.OptParent])
	}
	link := f.mustEndpoint(netA, ep1, "198.18.1.10/24")
	info, err := f.d.EndpointInfo(ctx, &network.InfoRequest{NetworkID: netA, EndpointID: ep1})
	if err != nil || info.Value["parent"] != "eth0" || info.Value["parent_option"] != "lana,eth0" {
		t.Fatalf("EndpointInfo = %v, %v; want parent eth0 and parent_option lana,eth0", info, err)
	}

	// lana appears while a container runs on eth0: the network stays.
	f.k.AddHostLink("lana", "device", 1500)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" {
		t.Fatalf("with a joined endpoint the network moved to %s", n.Parent)
	}
	if f.k.Parent(link) != "eth0" {
		t.Fatalf("endpoint link %s now on %q", link, f.k.Parent(link))
	}
	// Left but not deleted, the endpoint still lives on eth0 (Docker
	// may join it again): the network stays.
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "eth0" {
		t.Fatalf("with an endpoint not joined the network moved to %s", n.Parent)
	}
	// Once it is gone, the network moves to the first candidate.
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "lana,eth0"}})
	if n, _ := f.record(netA); n.Parent != "lana" || n.Options[config.OptParent] != "lana,eth0" {
		t.Fatalf("after the leave: link %s, option %q; want lana", n.Parent, n.Options[config.OptParent])
	}
	if _, ok := f.k.Link(link); ok {
		t.Errorf("the old endpoint link %s is left behind", link)
	}
	if _, err := f.endpoint(netA, ep1, "198.18.1.10/24", ""); err != nil {
		t.Fatalf("CreateEndpoint on the moved network: %v", err)
	}

	// The link under a joined network is gone (NICs renamed at a
	// reboot): it moves whatever the records say.
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{config.OptParent: "lanb,eth1"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	f.mustEndpoint(netB, "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002", "198.18.2.10/24")
	f.k.Remove("eth1")
	f.k.AddHostLink("lanb", "device", 9000)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{config.OptParent: "lanb,eth1"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	if n, _ := f.record(netB); n.Parent != "lanb" {
		t.Fatalf("network B on %s after eth1 went, want lanb", n.Parent)
	}

	// Moving obeys the parent rules on the new link: netC resolves to
	// lanc, where an overlapping network lives, once eth0 is gone.
	f.k.AddHostLink("lanc", "device", 1500)
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{config.OptParent: "lanc"}, V4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	f.mustCreate(netReq{ID: netD4, Opts: map[string]string{config.OptParent: "eth0,lanc"}, V4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	f.docker.setLive(netC)
	f.k.Remove("eth0")
	err = f.create(netReq{ID: netD4, Opts: map[string]string{config.OptParent: "eth0,lanc"}, V4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	if !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), dockerid.Short(netC)) || !strings.Contains(err.Error(), "nor move to lanc") {
		t.Fatalf("moving onto a link with an overlapping network: %v; want a conflict naming %s and the move", err, dockerid.Short(netC))
	}
	if n, ok := f.record(netD4); !ok || n.Parent != "eth0" {
		t.Fatalf("the refused move lost the record of network D (%v, on %q)", ok, n.Parent)
	}
}

// A move the new link refuses leaves a network whose old link still
// works where it was, and says nothing to Docker but success.
func TestRefusedMoveKeepsTheNetwork(t *testing.T) {
	f := newFixture(t)
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	x := netReq{ID: netA, Opts: map[string]string{config.OptParent: "lanq,eth1"}, V4: []string{"198.18.5.0/24,198.18.5.1/24"}}
	f.mustCreate(x)
	f.k.AddHostLink("lanq", "device", 1500)
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{config.OptParent: "lanq"}, V4: []string{"198.18.5.0/25,198.18.5.1/25"}})
	f.docker.setLive(netA, netB)
	f.mustCreate(x) // lanq is its first candidate now, but B overlaps there
	if n, _ := f.record(netA); n.Parent != "eth1" {
		t.Fatalf("network A on %s, want it kept on eth1", n.Parent)
	}
	link := f.mustEndpoint(netA, ep1, "198.18.5.10/24")
	if f.k.Parent(link) != "eth1" {
		t.Fatalf("endpoint of A on %s, want eth1", f.k.Parent(link))
	}
	// B goes stale (Docker no longer knows it): the next create moves A.
	if err := f.d.Leave(context.Background(), &network.LeaveRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeleteEndpoint(context.Background(), &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	f.docker.setLive(netA)
	f.mustCreate(x)
	if n, _ := f.record(netA); n.Parent != "lanq" {
		t.Fatalf("network A on %s once B was stale, want lanq", n.Parent)
	}
	f.wantNetworks(netA)
}

func TestAutoParentThroughTheDriver(t *testing.T) {
	f := newFixture(t)
	eth1, _ := f.k.Link("eth1")
	f.d.resolver.Routes = routeList{{Dst: netip.MustParsePrefix("198.18.1.0/24"), LinkIndex: eth1.Index, Table: kernel.MainTable}}
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{config.OptParent: "auto"}})
	if n, _ := f.record(netA); n.Parent != "eth1" || n.Options[config.OptParent] != "auto" {
		t.Fatalf("record: link %s, option %q; want eth1 (its connected route holds the subnet) and auto", n.Parent, n.Options[config.OptParent])
	}
	// AllocateNetwork checks the syntax only: the manager may have no such
	// links or routes.
	if _, err := config.AllocateNetwork(&network.AllocateNetworkRequest{NetworkID: netB, Options: map[string]string{config.OptParent: "auto.7"}}); err != nil {
		t.Errorf("AllocateNetwork(parent=auto.7): %v", err)
	}
	if _, err := config.AllocateNetwork(&network.AllocateNetworkRequest{NetworkID: netB, Options: map[string]string{config.OptParent: "auto.0"}}); !errors.Is(err, pluginapi.ErrInvalid) {
		t.Errorf("AllocateNetwork(parent=auto.0) = %v, want a refusal", err)
	}
	// Without a route view, auto is refused with the fix.
	f.d.resolver.Routes = nil
	if err := f.create(netReq{ID: netB, Opts: map[string]string{config.OptParent: "auto"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}}); err == nil || !strings.Contains(err.Error(), "-o parent=IFACE") {
		t.Errorf("auto without routes: %v", err)
	}
}

// A move takes the host link along and deletes the owned VLAN it leaves.
func TestMoveTakesTheHostLinkAndReleasesTheOwnedVLAN(t *testing.T) {
	f := newFixture(t)
	r := withHost(netA, "lanh.10,eth0.10", "198.18.1.5")
	f.mustCreate(r)
	shim := config.ShimName(netA)
	if f.k.Parent(shim) != "eth0.10" {
		t.Fatalf("host link on %q, want eth0.10", f.k.Parent(shim))
	}
	f.k.AddHostLink("lanh", "device", 1500)
	f.mustCreate(r)
	if n, _ := f.record(netA); n.Parent != "lanh.10" {
		t.Fatalf("network on %s, want lanh.10", n.Parent)
	}
	if f.k.Parent(shim) != "lanh.10" {
		t.Errorf("host link on %q after the move, want lanh.10", f.k.Parent(shim))
	}
	if _, ok := f.k.Link("eth0.10"); ok {
		t.Errorf("the VLAN eth0.10 underlay created is left behind with nothing on it")
	}
	if l, ok := f.k.Link("lanh.10"); !ok || l.Alias != f.d.mark {
		t.Errorf("lanh.10 = %+v, %v: want a VLAN carrying underlay's mark", l, ok)
	}
}
