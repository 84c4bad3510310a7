package dhcp6

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

func TestIdentities(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}
	if got := DUIDFromMAC(mac); !bytes.Equal(got, []byte{0, 3, 0, 1, 0x02, 0x42, 0xac, 0x11, 0x00, 0x02}) {
		t.Errorf("DUIDFromMAC = %x, want DUID-LL 00030001 and the MAC", got)
	}
	if got, want := LinkLocal(mac), netip.MustParseAddr("fe80::42:acff:fe11:2"); got != want {
		t.Errorf("LinkLocal = %s, want %s", got, want)
	}
	if LinkLocal(net.HardwareAddr{1, 2, 3}).IsValid() {
		t.Error("LinkLocal of a 3-byte MAC is valid")
	}
	a, b := EndpointDUID("ep-a"), EndpointDUID("ep-b")
	if !bytes.Equal(a, EndpointDUID("ep-a")) || bytes.Equal(a, b) || len(a) != 18 {
		t.Errorf("EndpointDUID: %x %x, want stable, distinct, 18 bytes", a, b)
	}
	d, err := dhcpv6.DUIDFromBytes(a)
	if u, ok := d.(*dhcpv6.DUIDUUID); err != nil || !ok || u.UUID[6]>>4 != 8 || u.UUID[8]>>6 != 2 {
		t.Errorf("EndpointDUID parses as %v, %v; want a version 8 DUID-UUID", d, err)
	}
	if EndpointIAID("ep-a") != EndpointIAID("ep-a") || EndpointIAID("ep-a") == EndpointIAID("ep-b") {
		t.Error("EndpointIAID is not stable and distinct")
	}
}

func TestRequestCheck(t *testing.T) {
	ok := macvlanReq(1)
	for _, tc := range []struct {
		name string
		edit func(r *Request)
		want string
	}{
		{"fine", func(*Request) {}, ""},
		{"no parent", func(r *Request) { r.Parent = "" }, "no parent"},
		{"short MAC", func(r *Request) { r.MAC = r.MAC[:4] }, "not an Ethernet address"},
		{"global source", func(r *Request) { r.LinkLocal = netip.MustParseAddr("2001:db8::1") }, "not a link-local"},
		{"no DUID", func(r *Request) { r.DUID = nil }, "not 3 to 130"},
		{"bad hint", func(r *Request) { r.Hint = netip.MustParseAddr("fe80::1") }, "link-local"},
	} {
		r := ok
		tc.edit(&r)
		err := r.check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: check() = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestFrames(t *testing.T) {
	mac := testMAC(1)
	ll := LinkLocal(mac)
	f := udpFrame(mac, allServersMAC, ll, allServers, clientPort, serverPort, []byte{1, 2, 3, 4, 5})
	src, _, err := clientMessage(f)
	if err != nil && !strings.Contains(err.Error(), "DHCPv6") && src != ll {
		t.Fatalf("clientMessage: %v", err)
	}
	if sum(f[ethHeader+ipv6Header:], pseudo(ll, allServers, protoUDP, len(f)-ethHeader-ipv6Header)) != 0xffff {
		t.Error("bad UDP checksum")
	}
	reply := udpFrame(mac, mac, ll, ll, serverPort, clientPort, []byte{7, 1, 2, 3})
	in, ok := parseFrame(reply)
	if !ok || !bytes.Equal(in.dhcp, []byte{7, 1, 2, 3}) || in.src != ll || !bytes.Equal(in.dstMAC, mac) {
		t.Errorf("parseFrame = %+v, %v", in, ok)
	}
	if _, ok := parseFrame(f); ok {
		t.Error("parseFrame took a datagram to port 547")
	}
	if g := solicitedNodeMAC(ll); g.String() != "33:33:ff:a8:00:01" {
		t.Errorf("solicited-node group %s", g)
	}
}

// The host name goes as a partial name in option 39 (flags S, one label,
// no terminating zero) of the messages that ask for addresses, and not
// in a Release or Decline.
func TestHostnameOption(t *testing.T) {
	r := &Request{Parent: "eth0", MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}, DUID: DUIDFromMAC(net.HardwareAddr{0x02, 0, 0, 0, 0, 1}), Hostname: "web"}
	for _, typ := range []dhcpv6.MessageType{dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeRelease} {
		m, err := build(typ, dhcpv6.TransactionID{1, 2, 3}, r, netip.Addr{}, nil, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := dhcpv6.MessageFromBytes(m.ToBytes())
		if err != nil {
			t.Fatal(err)
		}
		opt := parsed.GetOneOption(dhcpv6.OptionFQDN)
		if typ == dhcpv6.MessageTypeRelease {
			if opt != nil {
				t.Errorf("%s carries option 39", typ)
			}
			continue
		}
		if opt == nil {
			t.Fatalf("%s carries no option 39", typ)
		}
		if got, want := opt.ToBytes(), []byte{0x01, 3, 'w', 'e', 'b'}; !bytes.Equal(got, want) {
			t.Errorf("%s option 39 = %x, want %x", typ, got, want)
		}
	}
	r.Hostname = ""
	m, _ := build(dhcpv6.MessageTypeSolicit, dhcpv6.TransactionID{1, 2, 3}, r, netip.Addr{}, nil, 0, false)
	if m.GetOneOption(dhcpv6.OptionFQDN) != nil {
		t.Error("option 39 sent without a host name")
	}
}
