package leases

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// A lease the IPAM took for a DHCP pool (issue 36) is renewed as it was
// taken: with its client ID and host name; a -o dhcp=true macvlan lease
// has neither.
func TestRequestOfAnIPAMLease(t *testing.T) {
	n := record.Network{ID: "n", Parent: "eth0", Type: kernel.KindMacvlan, Config: record.NetworkConfig{DHCP: record.DHCPConfig{FromIPAM: true}}}
	ep := record.Endpoint{ID: "e", MAC: "52:31:86:b0:b1:32",
		Lease: &record.Lease{Addr: "198.18.180.120/24", ClientID: "015231" + "86b0b132", Hostname: "web"}}
	r, err := DHCP{}.Request(context.Background(), nil, n, ep)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 0x52, 0x31, 0x86, 0xb0, 0xb1, 0x32}
	if r.MAC.String() != ep.MAC || !bytes.Equal(r.ClientID, want) || r.Hostname != "web" || r.Address != netip.MustParseAddr("198.18.180.120") {
		t.Fatalf("request %+v: want MAC %s, client ID %x, host name web, address asked again", r, ep.MAC, want)
	}
	n.Config.DHCP = record.DHCPConfig{On: true}
	ep.Lease = &record.Lease{Addr: "198.18.180.121/24"}
	if r, err := (DHCP{}).Request(context.Background(), nil, n, ep); err != nil || r.ClientID != nil || r.Hostname != "" {
		t.Fatalf("a -o dhcp=true macvlan lease: %+v %v; want no client ID and no host name", r, err)
	}
	if !(DHCP{}).On(record.Network{Config: record.NetworkConfig{DHCP: record.DHCPConfig{FromIPAM: true}}}) {
		t.Fatal("the DHCP family does not renew the leases of a network on the IPAM's DHCP pool")
	}
}

// A DHCPv6 lease of the IPAM's (a DHCPv6 pool) is renewed with the DUID,
// IAID and host name it was taken with, not the endpoint's own IAID.
func TestRequest6OfAnIPAMLease(t *testing.T) {
	n := record.Network{ID: "n", Parent: "eth0", Type: kernel.KindMacvlan}
	n.Config.DHCP.FromIPAM6 = true
	ep := record.Endpoint{ID: "e", MAC: "52:31:86:b0:b1:32",
		Lease6: &record.Lease6{Addr: "2001:db8:1::120", DUID: "00030001523186b0b132", IAID: "86b0b132", Hostname: "web"}}
	r, err := DHCP6{}.Request(context.Background(), nil, n, ep)
	if err != nil {
		t.Fatal(err)
	}
	if r.IAID != [4]byte{0x86, 0xb0, 0xb1, 0x32} || hex.EncodeToString(r.DUID) != ep.Lease6.DUID || r.Hostname != "web" || r.MAC.String() != ep.MAC {
		t.Fatalf("request %+v: want the lease's DUID, IAID and host name", r)
	}
	if !(DHCP6{}).On(n) {
		t.Fatal("the DHCPv6 family does not renew the leases of a network on the IPAM's DHCPv6 pool")
	}
}
