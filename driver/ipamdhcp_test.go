package driver

import (
	"context"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/dhcp"
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
		Lease: record.Lease{Addr: web + "/24", ServerID: "198.18.1.1", ClientID: "01523186b0b132", Acquired: far, T1: far, T2: far, Expiry: far}}
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
