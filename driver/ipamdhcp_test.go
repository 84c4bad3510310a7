package driver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// A network on a DHCP pool of underlay's IPAM (issue 36): found by its
// pool's address space and prefix, refused on ipvlan and on another
// parent than the pool's; its endpoints get the MAC of the IPAM's lease
// (another --mac-address refused, naming underlay mac), hold the lease
// for the driver to renew, and the IPAM's record says so; an address
// the IPAM did not lease is refused.
func TestNetworkOnTheIPAMsDHCPPool(t *testing.T) {
	f := newFixture(t)
	f.close()
	f.dhcp4 = dhcp.New()
	f.open()
	const space, subnet, web = "underlay-local", "198.18.1.0/24", "198.18.1.120"
	far := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // no renewal during the test
	lease := store.IPAMLease{Name: "web", MAC: "52:31:86:b0:b1:32", Hostname: "web",
		Lease: &record.Lease{Addr: web + "/24", ServerID: "198.18.1.1", ClientID: "01523186b0b132", Hostname: "web", Acquired: far, T1: far, T2: far, Expiry: far}}
	if err := f.db.Batch(func(tx *store.Tx) error {
		if err := tx.PutIPAMPool(store.IPAMPool{ID: "p1", Space: space, Prefix: subnet, Parent: "eth0", DHCP: true}); err != nil {
			return err
		}
		return tx.PutIPAMLease("p1", web, lease)
	}); err != nil {
		t.Fatal(err)
	}
	pool := []string{subnet + ",198.18.1.1/24"}
	err := f.create(netReq{ID: "n-ipvlan", Opts: map[string]string{"parent": "eth0", "type": "ipvlan"}, V4: pool, Space: space})
	wantErr(t, err, pluginapi.ErrInvalid, "dhcp=true", "type=macvlan")
	err = f.create(netReq{ID: "n-eth1", Opts: map[string]string{"parent": "eth1"}, V4: pool, Space: space})
	wantErr(t, err, pluginapi.ErrInvalid, subnet, "parent=eth0", "eth1")
	// Another LAN with the same subnet, on eth1, with a pool of its own
	// that is not DHCP: its network is not on eth0's DHCP pool.
	if err := f.db.Batch(func(tx *store.Tx) error {
		return tx.PutIPAMPool(store.IPAMPool{ID: "p2", Space: space, Prefix: subnet, Parent: "eth1"})
	}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: "n-eth1b", Opts: map[string]string{"parent": "eth1"}, V4: pool, Space: space})
	if n, _ := f.record("n-eth1b"); n.Config.DHCP.FromIPAM {
		t.Fatal("a network of eth1's own pool taken for one on eth0's DHCP pool")
	}
	f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: "n-eth1b"})
	// Docker's own pool of that prefix is not the IPAM's.
	f.mustCreate(netReq{ID: "n-docker", Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	if n, _ := f.record("n-docker"); n.Config.DHCP.FromIPAM {
		t.Fatal("a pool of Docker's IPAM taken for the IPAM's DHCP pool")
	}
	f.mustCreate(netReq{ID: "n1", Opts: map[string]string{"parent": "eth0"}, V4: pool, Space: space})
	if n, _ := f.record("n1"); !n.Config.DHCP.FromIPAM {
		t.Fatal("the network on the IPAM's DHCP pool is not recorded as such")
	}

	_, err = f.endpoint("n1", "e-mac", web+"/24", "02:00:00:00:00:01")
	wantErr(t, err, pluginapi.ErrInvalid, "02:00:00:00:00:01", lease.MAC, "underlay mac --parent eth0 web", "drop --mac-address")
	_, err = f.endpoint("n1", "e-none", "198.18.1.121/24", "")
	wantErr(t, err, pluginapi.ErrNotFound, "198.18.1.121", "no lease")
	resp, err := f.endpoint("n1", "e1", web+"/24", "")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface == nil || resp.Interface.MacAddress != lease.MAC || resp.Interface.Address != "" {
		t.Fatalf("CreateEndpoint answered %+v: want only the lease's MAC %s", resp.Interface, lease.MAC)
	}
	var ep record.Endpoint
	var got store.IPAMLease
	if err := f.db.View(func(tx *store.Tx) (err error) {
		eps, err := tx.Endpoints("n1")
		if err != nil || len(eps) != 1 {
			return err
		}
		ep = eps[0]
		got, _, err = tx.IPAMLease("p1", web)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ep.MAC != lease.MAC || ep.Lease == nil || ep.Lease.Addr != web+"/24" || ep.Lease.Hostname != "web" || ep.Lease.ClientID != lease.Lease.ClientID {
		t.Fatalf("endpoint record %+v (lease %+v): want the IPAM's lease, host name and client ID", ep, ep.Lease)
	}
	if got.EndpointID != "e1" || got.NetworkID != "n1" {
		t.Fatalf("the IPAM's lease record %+v does not name the endpoint that took it", got)
	}
	if _, err := f.d.Join(context.Background(), &network.JoinRequest{NetworkID: "n1", EndpointID: "e1", SandboxKey: "/var/run/docker/netns/x"}); err != nil {
		t.Fatal(err)
	}
}

// Docker asking again for an endpoint keeps its lease as renewed since;
// a DHCPv6 pool's lease is taken over as the DHCP one, with its MAC; two
// leases of one endpoint with two MACs (no name: random ones) are
// refused.
func TestIPAMLeasesAgainAndIPv6(t *testing.T) {
	f := newFixture(t)
	f.close()
	f.dhcp4 = dhcp.New()
	f.dhcp6 = fake6{}
	f.open()
	far := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const mac = "52:31:86:b0:b1:32"
	l4 := store.IPAMLease{Name: "web", MAC: mac, Lease: &record.Lease{Addr: "198.18.1.120/24", ClientID: "01523186b0b132", Acquired: far, T1: far, T2: far, Expiry: far}}
	l6 := store.IPAMLease{Name: "web", MAC: mac, Lease6: &record.Lease6{Addr: "2001:db8:1::120", DUID: "00030001523186b0b132", IAID: "86b0b132", Hostname: "web", Acquired: far, T1: time.Hour, T2: time.Hour, Preferred: time.Hour, Valid: time.Hour}}
	other6 := store.IPAMLease{MAC: "02:00:00:00:00:09", Lease6: &record.Lease6{Addr: "2001:db8:1::121", DUID: "0003000102000000000009", IAID: "00000009", Acquired: far, T1: time.Hour, T2: time.Hour, Preferred: time.Hour, Valid: time.Hour}}
	other4 := store.IPAMLease{MAC: "02:00:00:00:00:08", Lease: &record.Lease{Addr: "198.18.1.121/24", Acquired: far, T1: far, T2: far, Expiry: far}}
	if err := f.db.Batch(func(tx *store.Tx) error {
		for _, p := range []store.IPAMPool{{ID: "p4", Space: "underlay-local", Prefix: "198.18.1.0/24", Parent: "eth0", DHCP: true}, {ID: "p6", Space: "underlay-local", Prefix: "2001:db8:1::/64", Parent: "eth0", DHCP: true}} {
			if err := tx.PutIPAMPool(p); err != nil {
				return err
			}
		}
		for _, x := range []struct {
			pool, addr string
			l          store.IPAMLease
		}{{"p4", "198.18.1.120", l4}, {"p6", "2001:db8:1::120", l6}, {"p6", "2001:db8:1::121", other6}, {"p4", "198.18.1.121", other4}} {
			if err := tx.PutIPAMLease(x.pool, x.addr, x.l); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: "n1", Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}, Space: "underlay-local"})
	if n, _ := f.record("n1"); !n.Config.DHCP.FromIPAM || !n.Config.DHCP.FromIPAM6 {
		t.Fatalf("network config %+v: want both families from the IPAM's DHCP pools", n.Config.DHCP)
	}
	create := func(epID, a4, a6 string) (*network.CreateEndpointResponse, error) {
		return f.d.CreateEndpoint(context.Background(), &network.CreateEndpointRequest{NetworkID: "n1", EndpointID: epID,
			Interface: &network.EndpointInterface{Address: a4, AddressIPv6: a6}})
	}
	resp, err := create("e1", "198.18.1.120/24", "2001:db8:1::120/64")
	if err != nil || resp.Interface == nil || resp.Interface.MacAddress != mac {
		t.Fatalf("CreateEndpoint: %+v %v; want MAC %s", resp, err, mac)
	}
	ep, _, _ := f.endpointRecord("n1", "e1")
	if ep.Lease == nil || ep.Lease6 == nil || ep.Lease6.Addr != "2001:db8:1::120" || ep.Lease6.Hostname != "web" {
		t.Fatalf("endpoint %+v: want both leases", ep)
	}
	// The lease renewed meanwhile; Docker asks again: it stays.
	renewed := *ep.Lease
	renewed.T1 = far.Add(time.Hour)
	ep.Lease = &renewed
	if err := f.db.Batch(func(tx *store.Tx) error { return tx.PutEndpoint(ep) }); err != nil {
		t.Fatal(err)
	}
	if _, err := create("e1", "198.18.1.120/24", "2001:db8:1::120/64"); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := f.endpointRecord("n1", "e1"); again.Lease == nil || !again.Lease.T1.Equal(renewed.T1) {
		t.Fatalf("asked again: lease %+v, want the renewed one (T1 %s)", again.Lease, renewed.T1)
	}
	// Another endpoint given e1's address: refused.
	_, err = create("e2", "198.18.1.120/24", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.1.120", "e1")
	// No name: two random MACs.
	_, err = create("e3", "198.18.1.121/24", "2001:db8:1::121/64")
	wantErr(t, err, pluginapi.ErrInvalid, "02:00:00:00:00:08", "02:00:00:00:00:09", "no container name")
}

// fake6 is a DHCPv6 client that is never asked (the leases are far from
// due).
type fake6 struct{}

func (fake6) Acquire(context.Context, dhcp6.Request) (dhcp6.Lease, error) {
	return dhcp6.Lease{}, errors.New("not here")
}
func (fake6) Renew(context.Context, dhcp6.Lease, dhcp6.Request) (dhcp6.Lease, error) {
	return dhcp6.Lease{}, errors.New("not here")
}
func (fake6) Rebind(context.Context, dhcp6.Lease, dhcp6.Request) (dhcp6.Lease, error) {
	return dhcp6.Lease{}, errors.New("not here")
}
func (fake6) Release(context.Context, dhcp6.Lease, dhcp6.Request) error { return nil }
func (fake6) Decline(context.Context, dhcp6.Lease, dhcp6.Request) error { return nil }
