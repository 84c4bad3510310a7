package driver

import (
	"context"
	"net"
	"testing"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// macFixture is a fixture whose parent eth2 has a permanent MAC, as a NIC.
func macFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.k.AddLink(kernel.Link{Name: "eth2", Kind: "device", MTU: 1500, MAC: "52:54:00:12:34:56", PermMAC: "52:54:00:aa:bb:cc"})
	return f
}

func (f *fixture) macOf(netID, epID, addr string) string {
	f.t.Helper()
	resp, err := f.endpoint(netID, epID, addr, "")
	if err != nil {
		f.t.Fatalf("CreateEndpoint %s: %v", epID, err)
	}
	if resp.Interface == nil || resp.Interface.MacAddress == "" {
		f.t.Fatalf("CreateEndpoint %s answered no MAC", epID)
	}
	mac, err := net.ParseMAC(resp.Interface.MacAddress)
	if err != nil || mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
		f.t.Fatalf("MAC %q is not a locally administered unicast MAC", resp.Interface.MacAddress)
	}
	return resp.Interface.MacAddress
}

func (f *fixture) deleteEndpoint(netID, epID string) {
	f.t.Helper()
	if err := f.d.DeleteEndpoint(context.Background(), &network.DeleteEndpointRequest{NetworkID: netID, EndpointID: epID}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) deleteNetwork(netID string) {
	f.t.Helper()
	if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: netID}); err != nil {
		f.t.Fatal(err)
	}
}

func TestStableMACFollowsTheAddressOnTheParent(t *testing.T) {
	f := macFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth2"}})
	first := f.macOf(netA, epA, "198.18.1.10/24")
	other := f.macOf(netA, epB, "198.18.1.11/24")
	if other == first {
		t.Fatalf("two addresses got the same MAC %s", first)
	}
	// The container comes back: a new endpoint with the same address.
	f.deleteEndpoint(netA, epA)
	if again := f.macOf(netA, epC, "198.18.1.10/24"); again != first {
		t.Fatalf("re-created endpoint got MAC %s, want %s (same address, same parent)", again, first)
	}
	f.deleteEndpoint(netA, epC)
	f.deleteEndpoint(netA, epB)
	// The network comes back (compose down/up), the daemon restarts.
	f.deleteNetwork(netA)
	f.restart()
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth2"}})
	if again := f.macOf(netB, epA, "198.18.1.10/24"); again != first {
		t.Fatalf("endpoint of the re-created network got MAC %s, want %s", again, first)
	}
}

func TestRandomMACPolicy(t *testing.T) {
	f := macFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth2", "mac_address_policy": "random"}})
	first := f.macOf(netA, epA, "198.18.1.10/24")
	f.deleteEndpoint(netA, epA)
	if again := f.macOf(netA, epB, "198.18.1.10/24"); again == first {
		t.Fatalf("random policy gave the same MAC %s twice", first)
	}
}

func TestStableMACInUseFallsBackToRandom(t *testing.T) {
	f := macFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth2"}})
	stable := f.macOf(netA, epA, "198.18.1.10/24")
	f.deleteEndpoint(netA, epA)
	p, _ := f.k.Link("eth2")
	f.k.AddLink(kernel.Link{Name: "theirs", Kind: kernel.KindMacvlan, ParentIndex: p.Index, MTU: 1500, MAC: stable})
	got := f.macOf(netA, epB, "198.18.1.10/24")
	if got == stable {
		t.Fatalf("endpoint got MAC %s, which link theirs holds on the parent", got)
	}
	link := f.mustEndpoint(netA, epB, "198.18.1.10/24")
	if l, _ := f.k.Link(link); l.MAC != got {
		t.Fatalf("link MAC %q, want the answered %s", l.MAC, got)
	}
}

func TestMACPolicyOptionRefusals(t *testing.T) {
	f := macFixture(t)
	err := f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth2", "mac_address_policy": "sticky"}})
	wantErr(t, err, pluginapi.ErrInvalid, `"sticky"`, "stable, random")
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth2", "type": "ipvlan", "mac_address_policy": "stable"}})
	wantErr(t, err, pluginapi.ErrInvalid, "ipvlan", "drop the option")
}
