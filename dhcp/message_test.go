package dhcp

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	testMAC = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0xb4, 0x01}
	testXID = dhcpv4.TransactionID{1, 2, 3, 4}
	addrA   = netip.MustParseAddr("198.18.180.101")
	serverA = netip.MustParseAddr("198.18.180.1")
)

// wire round-trips a message through its bytes, as a server sees it.
func wire(t *testing.T) func(*dhcpv4.DHCPv4, error) *dhcpv4.DHCPv4 {
	return func(m *dhcpv4.DHCPv4, err error) *dhcpv4.DHCPv4 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out, err := dhcpv4.FromBytes(m.ToBytes())
		if err != nil {
			t.Fatalf("the message does not parse: %v", err)
		}
		return out
	}
}

func TestMessages(t *testing.T) {
	r := Request{Parent: "lan0", MAC: testMAC, ClientID: ClientIDFromName("underlay-ep1"), Hostname: "web"}
	d := wire(t)(discover(r, testXID))
	rq := wire(t)(request(r, testXID, addrA, serverA))
	rb := wire(t)(request(r, testXID, addrA, netip.Addr{}))
	rl := wire(t)(release(r, testXID, addrA, serverA))
	dc := wire(t)(decline(r, testXID, addrA, serverA, "address in use"))
	for _, tc := range []struct {
		name      string
		m         *dhcpv4.DHCPv4
		typ       dhcpv4.MessageType
		broadcast bool
		ciaddr    string
		requested net.IP
		server    net.IP
	}{
		{"discover", d, dhcpv4.MessageTypeDiscover, true, "0.0.0.0", nil, nil},
		{"request (selecting, renewing)", rq, dhcpv4.MessageTypeRequest, true, "0.0.0.0", addrA.AsSlice(), serverA.AsSlice()},
		{"request (rebinding)", rb, dhcpv4.MessageTypeRequest, true, "0.0.0.0", addrA.AsSlice(), nil},
		{"release", rl, dhcpv4.MessageTypeRelease, false, addrA.String(), nil, serverA.AsSlice()},
		{"decline", dc, dhcpv4.MessageTypeDecline, false, "0.0.0.0", addrA.AsSlice(), serverA.AsSlice()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			if m.MessageType() != tc.typ || m.OpCode != dhcpv4.OpcodeBootRequest || m.TransactionID != testXID {
				t.Errorf("type %s op %s xid %s, want %s BootRequest %s", m.MessageType(), m.OpCode, m.TransactionID, tc.typ, testXID)
			}
			if m.IsBroadcast() != tc.broadcast {
				t.Errorf("BROADCAST flag %v, want %v", m.IsBroadcast(), tc.broadcast)
			}
			if !bytes.Equal(m.ClientHWAddr, testMAC) {
				t.Errorf("chaddr %s, want %s", m.ClientHWAddr, testMAC)
			}
			if got := m.Options.Get(dhcpv4.OptionClientIdentifier); !bytes.Equal(got, r.ClientID) {
				t.Errorf("option 61 %x, want %x", got, r.ClientID)
			}
			if m.ClientIPAddr.String() != tc.ciaddr {
				t.Errorf("ciaddr %s, want %s", m.ClientIPAddr, tc.ciaddr)
			}
			if got := m.Options.Get(dhcpv4.OptionRequestedIPAddress); !bytes.Equal(got, tc.requested) {
				t.Errorf("option 50 %v, want %v", net.IP(got), tc.requested)
			}
			if got := m.Options.Get(dhcpv4.OptionServerIdentifier); !bytes.Equal(got, tc.server) {
				t.Errorf("option 54 %v, want %v", net.IP(got), tc.server)
			}
			if tc.typ == dhcpv4.MessageTypeDecline {
				// RFC 2131 table 5: no 55, 57, 12 or 51 in a DECLINE.
				for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionParameterRequestList, dhcpv4.OptionMaximumDHCPMessageSize, dhcpv4.OptionHostName, dhcpv4.OptionIPAddressLeaseTime} {
					if m.Options.Has(o) {
						t.Errorf("DECLINE carries option %s", o)
					}
				}
				if m.Message() != "address in use" || !m.YourIPAddr.IsUnspecified() {
					t.Errorf("DECLINE option 56 %q yiaddr %s, want \"address in use\" and 0.0.0.0", m.Message(), m.YourIPAddr)
				}
			}
			if tc.typ != dhcpv4.MessageTypeRelease && tc.typ != dhcpv4.MessageTypeDecline {
				if m.HostName() != "web" {
					t.Errorf("option 12 %q, want web", m.HostName())
				}
				if !m.ParameterRequestList().Has(dhcpv4.OptionClasslessStaticRoute) || !m.ParameterRequestList().Has(dhcpv4.OptionRouter) {
					t.Errorf("option 55 %v asks for neither 121 nor 3", m.ParameterRequestList())
				}
			}
		})
	}
	t.Run("discover asks for a known address", func(t *testing.T) {
		r := Request{Parent: "lan0", MAC: testMAC, Address: addrA}
		m := wire(t)(discover(r, testXID))
		if got := m.Options.Get(dhcpv4.OptionRequestedIPAddress); !bytes.Equal(got, addrA.AsSlice()) {
			t.Fatalf("option 50 %v, want %s", net.IP(got), addrA)
		}
		if m.Options.Get(dhcpv4.OptionClientIdentifier) != nil || m.Options.Get(dhcpv4.OptionHostName) != nil {
			t.Fatal("options 61 and 12 sent though the request has none")
		}
	})
	t.Run("discover asks for Only over Address", func(t *testing.T) {
		only := netip.MustParseAddr("198.18.180.150")
		m := wire(t)(discover(Request{Parent: "lan0", MAC: testMAC, Address: addrA, Only: only}, testXID))
		if got := m.Options.Get(dhcpv4.OptionRequestedIPAddress); !bytes.Equal(got, only.AsSlice()) {
			t.Fatalf("option 50 %v, want %s", net.IP(got), only)
		}
	})
}

func TestRequestCheck(t *testing.T) {
	ok := Request{Parent: "lan0", MAC: testMAC}
	if err := ok.check(); err != nil {
		t.Fatalf("a valid request is refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"no parent", func(r *Request) { r.Parent = "" }, "not a link name"},
		{"long parent", func(r *Request) { r.Parent = "a-very-long-link-name" }, "not a link name"},
		{"no MAC", func(r *Request) { r.MAC = nil }, "not an Ethernet unicast"},
		{"multicast MAC", func(r *Request) { r.MAC = net.HardwareAddr{1, 0, 0x5e, 0, 0, 1} }, "not an Ethernet unicast"},
		{"zero MAC", func(r *Request) { r.MAC = make(net.HardwareAddr, 6) }, "not an Ethernet unicast"},
		{"short client ID", func(r *Request) { r.ClientID = []byte{0} }, "2 to 255"},
		{"long hostname", func(r *Request) { r.Hostname = strings.Repeat("h", 256) }, "too long"},
		{"IPv6 address", func(r *Request) { r.Address = netip.MustParseAddr("2001:db8::1") }, "not IPv4"},
		{"IPv6 only address", func(r *Request) { r.Only = netip.MustParseAddr("2001:db8::1") }, "not an IPv4 unicast"},
		{"0.0.0.0 only", func(r *Request) { r.Only = netip.IPv4Unspecified() }, "not an IPv4 unicast"},
	} {
		r := ok
		tc.edit(&r)
		if err := r.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestMine(t *testing.T) {
	withID := Request{Parent: "lan0", MAC: testMAC, ClientID: ClientIDFromName("a")}
	noID := Request{Parent: "lan0", MAC: testMAC}
	reply := func(mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(testMAC), func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply }}, mods...)...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		r    Request
		m    *dhcpv4.DHCPv4
		want bool
	}{
		{"same MAC, no echo", noID, reply(), true},
		{"same MAC and client ID", withID, reply(dhcpv4.WithOption(dhcpv4.OptClientIdentifier(ClientIDFromName("a")))), true},
		{"other client ID (ipvlan neighbour)", withID, reply(dhcpv4.WithOption(dhcpv4.OptClientIdentifier(ClientIDFromName("b")))), false},
		{"server echoes an ID the client never sent", noID, reply(dhcpv4.WithOption(dhcpv4.OptClientIdentifier(ClientIDFromName("b")))), false},
		{"other MAC", noID, reply(dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 9})), false},
		{"a request, not a reply", noID, reply(func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootRequest }), false},
	} {
		if got := mine(tc.r, tc.m); got != tc.want {
			t.Errorf("%s: mine %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The host name goes in option 12, and with FQDN in option 81 too as a
// partial name (flags S and E, RCODEs 0, one label without the zero);
// neither goes in a RELEASE.
func TestHostnameAndClientFQDN(t *testing.T) {
	r := Request{Parent: "eth0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Hostname: "web", FQDN: true}
	m, err := discover(r, dhcpv4.TransactionID{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.HostName(); got != "web" {
		t.Errorf("option 12 = %q, want web", got)
	}
	if got, want := m.Options.Get(dhcpv4.OptionFQDN), []byte{0x05, 0, 0, 3, 'w', 'e', 'b'}; !bytes.Equal(got, want) {
		t.Errorf("option 81 = %x, want %x", got, want)
	}
	r.FQDN = false
	if m, _ := discover(r, dhcpv4.TransactionID{1, 2, 3, 4}); m.Options.Has(dhcpv4.OptionFQDN) {
		t.Error("option 81 sent without FQDN")
	}
	r.FQDN = true
	rel, err := release(r, dhcpv4.TransactionID{1, 2, 3, 5}, netip.MustParseAddr("198.18.180.120"), netip.MustParseAddr("198.18.180.1"))
	if err != nil || rel.Options.Has(dhcpv4.OptionFQDN) || rel.Options.Has(dhcpv4.OptionHostName) {
		t.Errorf("a RELEASE carries the host name: %v %v", rel, err)
	}
}
