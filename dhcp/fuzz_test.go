package dhcp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// FuzzReply feeds arbitrary bytes to everything a packet from the LAN
// reaches: as a frame through demux (rawlink's IPv4/UDP parser), and as
// a DHCP message through parse, mine, leaseFromACK and Plan. None
// may panic; a malformed packet is dropped.
func FuzzReply(f *testing.F) {
	t := &testing.T{}
	good := ack(t, dhcpv4.OptServerIdentifier(serverA.AsSlice()), dhcpv4.OptIPAddressLeaseTime(time.Minute),
		dhcpv4.OptSubnetMask(net.CIDRMask(24, 32)), dhcpv4.OptRouter(serverA.AsSlice()),
		dhcpv4.OptClasslessStaticRoute(route("198.18.190.0/24", "198.18.180.1"), route("0.0.0.0/0", "198.18.180.1"))).ToBytes()
	f.Add(good)
	f.Add(frame(testMAC, serverA, netip.MustParseAddr("255.255.255.255"), good))
	f.Add(good[:240])
	f.Add([]byte{})
	r := Request{Parent: "lan0", MAC: testMAC, ClientID: ClientIDFromName("x")}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = demux(b)
		m := parse(b)
		if m == nil {
			return
		}
		_ = mine(r, m)
		_ = answers(addrA, serverA, &notes{})(m, nil)
		_ = offerOf(m, testMAC)
		_ = checkOffer(m, addrA, serverA)
		if l, err := leaseFromACK(m, time.Now()); err == nil {
			_ = Plan(l, time.Now().Add(time.Minute))
			_ = l.Gateway()
			_ = keep(l, l, m)
		}
	})
}
