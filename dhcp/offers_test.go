package dhcp

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/internal/rawlink"
)

// sentLog records the DHCP messages clients write on a memWire.
type sentLog struct {
	mu   sync.Mutex
	msgs []*dhcpv4.DHCPv4
}

type recordingConn struct {
	net.PacketConn
	log *sentLog
}

func (c recordingConn) WriteTo(b []byte, a net.Addr) (int, error) {
	if d, ok := parseUDPFrame(b, serverPort); ok {
		if m, err := dhcpv4.FromBytes(d); err == nil {
			c.log.mu.Lock()
			c.log.msgs = append(c.log.msgs, m)
			c.log.mu.Unlock()
		}
	}
	return c.PacketConn.WriteTo(b, a)
}

func (l *sentLog) all() []*dhcpv4.DHCPv4 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// recordingClient is w.client() whose sent messages are recorded.
func recordingClient(w *memWire) (*Client, *sentLog) {
	log := &sentLog{}
	open := func(parent string) (net.PacketConn, error) {
		c, err := w.open(parent)
		if err != nil {
			return nil, err
		}
		return recordingConn{c, log}, nil
	}
	return New(WithConn(open), WithRetransmit(300*time.Millisecond)), log
}

// onlyDiscovers fails unless every message sent is a DISCOVER of one
// transaction from mac, and there were at least min of them.
func onlyDiscovers(t *testing.T, sent []*dhcpv4.DHCPv4, mac net.HardwareAddr, min int) {
	t.Helper()
	for _, m := range sent {
		if m.MessageType() != dhcpv4.MessageTypeDiscover || m.TransactionID != sent[0].TransactionID || m.ClientHWAddr.String() != mac.String() {
			t.Fatalf("the client sent a %s (xid %s, chaddr %s): want only DISCOVERs of xid %s from %s", m.MessageType(), m.TransactionID, m.ClientHWAddr, sent[0].TransactionID, mac)
		}
	}
	if len(sent) < min {
		t.Fatalf("the client sent %d DISCOVERs, want at least %d (the retransmissions)", len(sent), min)
	}
}

// Two servers answer the DISCOVER and its retransmissions: both are
// returned, each once, and nothing but DISCOVERs is sent.
func TestOffersEveryServerOnce(t *testing.T) {
	w := newWire(t)
	a := w.serve(itest.DHCPConfig{LeaseTime: time.Minute})
	b := w.serve(itest.DHCPConfig{ID: secondServer, Router: secondServer, First: netip.MustParseAddr("198.18.180.200"), LeaseTime: 2 * time.Minute, Delay: 30 * time.Millisecond})
	c, sent := recordingClient(w)
	r := Request{Parent: lanParent, MAC: mac(1), ClientID: ClientIDFromName("ep1"), Hostname: "web"}
	start := time.Now()
	offers, err := c.Offers(ctxFor(t, 700*time.Millisecond), r)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("Offers returned after %s, before its context ended (700ms): it must collect until then", took)
	}
	want := []Offer{
		{Server: serverAddr.Addr(), ServerMAC: mac(200), Addr: netip.MustParsePrefix("198.18.180.100/24"), Router: serverAddr.Addr(), LeaseTime: time.Minute},
		{Server: secondServer, ServerMAC: mac(201), Addr: netip.MustParsePrefix("198.18.180.200/24"), Router: secondServer, LeaseTime: 2 * time.Minute},
	}
	if len(offers) != 2 || offers[0].String() != want[0].String() || offers[1].String() != want[1].String() {
		t.Fatalf("offers %v, want %v", offers, want)
	}
	// Each server answered both DISCOVERs (at 0 and 300 ms): the
	// retransmission's OFFERs counted once.
	for _, s := range []*itest.DHCPServer{a, b} {
		answered := 0
		for _, m := range s.Messages(itest.OfType(dhcpv4.MessageTypeDiscover)) {
			if m.Answer == dhcpv4.MessageTypeOffer {
				answered++
			}
		}
		if answered < 2 {
			t.Errorf("server %s answered %d DISCOVERs, want 2 or more: the test proves nothing of duplicates", s.ID(), answered)
		}
	}
	msgs := sent.all()
	onlyDiscovers(t, msgs, r.MAC, 2)
	d := msgs[0]
	if string(d.Options.Get(dhcpv4.OptionClientIdentifier)) != string(r.ClientID) || d.HostName() != "web" || d.Options.Has(dhcpv4.OptionRequestedIPAddress) || !d.IsBroadcast() {
		t.Errorf("DISCOVER %s: want option 61 %x, hostname web, no option 50, the BROADCAST flag", d.Summary(), r.ClientID)
	}
	// The servers, which ran on, hold no lease and got no REQUEST.
	if itest.WaitFor(300*time.Millisecond, func() bool {
		return len(a.Leases())+len(b.Leases())+len(a.Messages(itest.OfType(dhcpv4.MessageTypeRequest)))+len(b.Messages(itest.OfType(dhcpv4.MessageTypeRequest))) > 0
	}) {
		t.Fatalf("a server holds a lease or got a REQUEST: %s %s", a.LeasesString(), b.LeasesString())
	}
	onlyDiscovers(t, sent.all(), r.MAC, 2)
	if c.openPorts() != 0 {
		t.Fatal("the connection stays open after Offers")
	}
}

// String is for the tests' comparisons.
func (o Offer) String() string {
	return strings.Join([]string{o.Server.String(), o.ServerMAC.String(), o.Addr.String(), o.Router.String(), o.LeaseTime.String()}, " ")
}

// The end of the context returns what came before it, without an error;
// a server that answers later is not waited for, and option 50 is sent
// only when the request says an address.
func TestOffersUntilContextEnds(t *testing.T) {
	w := newWire(t)
	w.serve(itest.DHCPConfig{})
	late := w.serve(itest.DHCPConfig{ID: secondServer, Delay: 700 * time.Millisecond})
	c, sent := recordingClient(w)
	r := Request{Parent: lanParent, MAC: mac(2), Address: netip.MustParseAddr("198.18.180.120")}
	offers, err := c.Offers(ctxFor(t, 500*time.Millisecond), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 1 || offers[0].Server != serverAddr.Addr() || offers[0].Addr != netip.MustParsePrefix("198.18.180.120/24") {
		t.Fatalf("offers %v, want the first server's of 198.18.180.120/24 only", offers)
	}
	if len(late.Messages(itest.OfType(dhcpv4.MessageTypeDiscover))) == 0 {
		t.Fatal("the late server saw no DISCOVER: the test proves nothing")
	}
	msgs := sent.all()
	onlyDiscovers(t, msgs, r.MAC, 1)
	if got := msgs[0].RequestedIPAddress(); !got.Equal(r.Address.AsSlice()) {
		t.Errorf("DISCOVER option 50 %v, want %s", got, r.Address)
	}

	// No server: no offers, no error, when the context ends.
	w = newWire(t)
	c, _ = recordingClient(w)
	if offers, err := c.Offers(ctxFor(t, 200*time.Millisecond), r); err != nil || len(offers) != 0 {
		t.Fatalf("Offers with no server: %v, %v; want none and no error", offers, err)
	}
	// A parent the opener refuses: its error, naming it.
	if _, err := c.Offers(ctxFor(t, 200*time.Millisecond), Request{Parent: "nosuch0", MAC: mac(2)}); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("Offers on a parent that cannot be opened: %v, want its error naming it", err)
	}
	if _, err := c.Offers(ctxFor(t, 200*time.Millisecond), Request{Parent: lanParent}); err == nil || !strings.Contains(err.Error(), "MAC") {
		t.Fatalf("Offers without a MAC: %v, want the request refused", err)
	}
}

// parseUDPFrame is the payload of a UDP datagram to port in frame f.
func parseUDPFrame(f []byte, port uint16) ([]byte, bool) {
	d, ok := rawlink.ParseUDP(f, port)
	return d.Data, ok
}
