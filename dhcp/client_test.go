package dhcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquireAll acquires a lease for every request at once.
func acquireAll(t *testing.T, c *Client, reqs []Request) []Lease {
	t.Helper()
	leases, errs := make([]Lease, len(reqs)), make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { leases[i], errs[i] = c.Acquire(ctxFor(t, 10*time.Second), r) })
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Acquire for %s: %v", reqs[i].who(), err)
		}
		if j, dup := seen[leases[i].Addr.Addr()]; dup {
			t.Fatalf("%s and %s both got %s", reqs[j].who(), reqs[i].who(), leases[i].Addr)
		}
		seen[leases[i].Addr.Addr()] = i
	}
	return leases
}

func TestAcquireMacvlanEndpoints(t *testing.T) {
	l := newLAN(t)
	l.serve(10 * time.Second)
	c := l.client()
	var reqs []Request
	for i := range 12 { // many concurrent calls share one socket on the parent
		reqs = append(reqs, Request{Parent: lanParent, MAC: mac(i + 1), Hostname: "web"})
	}
	before := time.Now()
	leases := acquireAll(t, c, reqs)
	lease := leases[0]
	if !netip.MustParsePrefix("198.18.180.0/24").Contains(lease.Addr.Addr()) || lease.Addr.Bits() != 24 {
		t.Errorf("address %s, want one of 198.18.180.0/24 with its length", lease.Addr)
	}
	wantRoutes := []Route{{netip.MustParsePrefix("198.18.190.0/24"), serverAddr.Addr()}}
	if lease.Router != serverAddr.Addr() || lease.ServerID != serverAddr.Addr() || len(lease.Routes) != 1 || lease.Routes[0] != wantRoutes[0] {
		t.Errorf("router %s server %s routes %v, want %s, %s, %v", lease.Router, lease.ServerID, lease.Routes, serverAddr.Addr(), serverAddr.Addr(), wantRoutes)
	}
	if lease.LeaseTime != 10*time.Second || lease.T1 != 5*time.Second || lease.T2 != 8750*time.Millisecond || lease.Acquired.Before(before) {
		t.Errorf("lease time %s T1 %s T2 %s acquired %s, want 10s 5s 8.75s after %s", lease.LeaseTime, lease.T1, lease.T2, lease.Acquired, before)
	}
	if n := c.openPorts(); n != 0 {
		t.Errorf("%d parent sockets stay open after the calls", n)
	}
}

func TestAcquireIpvlanClientIDs(t *testing.T) {
	l := newLAN(t)
	s := l.serve(10 * time.Second)
	c := l.client()
	a := Request{Parent: lanParent, MAC: l.parentMAC, ClientID: ClientIDFromName("underlay-ep-a")}
	b := Request{Parent: lanParent, MAC: l.parentMAC, ClientID: ClientIDFromName("underlay-ep-b")}
	leases := acquireAll(t, c, []Request{a, b})
	// The same client ID asks again: the same address.
	again, err := c.Acquire(ctxFor(t, 10*time.Second), a)
	if err != nil || again.Addr != leases[0].Addr {
		t.Fatalf("Acquire again for %s: %v, %v; want %s", a.who(), again.Addr, err, leases[0].Addr)
	}
	if ds, _ := s.saw(dhcpv4.MessageTypeDiscover); len(ds) != 3 || string(ds[0].ClientHWAddr) != string(l.parentMAC) {
		t.Errorf("server saw %d DISCOVERs, want 3 with the parent's MAC %s", len(ds), l.parentMAC)
	}
}

func TestRenewAndRelease(t *testing.T) {
	l := newLAN(t)
	s := l.serve(10 * time.Second)
	c := l.client()
	r := Request{Parent: lanParent, MAC: mac(1), ClientID: ClientIDFromName("ep")}
	first, err := c.Acquire(ctxFor(t, 10*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	renewed, err := c.Renew(ctxFor(t, 10*time.Second), first, r)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if renewed.Addr != first.Addr || !renewed.Acquired.After(first.Acquired.Add(time.Second)) {
		t.Fatalf("renewed %s acquired %s, want %s acquired after %s", renewed.Addr, renewed.Acquired, first.Addr, first.Acquired.Add(time.Second))
	}
	if e, f := Plan(renewed, time.Now()).ExpiresAt, Plan(first, time.Now()).ExpiresAt; !e.After(f) {
		t.Fatalf("the renewal did not extend the lease: expires %s, was %s", e, f)
	}
	reqs, _ := s.saw(dhcpv4.MessageTypeRequest)
	last := reqs[len(reqs)-1]
	if !last.ClientIPAddr.IsUnspecified() || last.ServerIdentifier() == nil || !last.RequestedIPAddress().Equal(first.Addr.Addr().AsSlice()) {
		t.Errorf("renewal REQUEST ciaddr %s option 54 %v option 50 %v; want 0.0.0.0, the server, %s", last.ClientIPAddr, last.ServerIdentifier(), last.RequestedIPAddress(), first.Addr.Addr())
	}

	// Past T2 (rebinding) the REQUEST names no server.
	old := renewed
	old.Acquired = time.Now().Add(-9 * time.Second)
	if _, err := c.Renew(ctxFor(t, 10*time.Second), old, r); err != nil {
		t.Fatalf("Renew while rebinding: %v", err)
	}
	reqs, _ = s.saw(dhcpv4.MessageTypeRequest)
	if last := reqs[len(reqs)-1]; last.ServerIdentifier() != nil {
		t.Errorf("rebinding REQUEST names server %s, want none", last.ServerIdentifier())
	}

	if err := c.Release(ctxFor(t, 5*time.Second), renewed, r); err != nil {
		t.Fatalf("Release: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for s.holds(first.Addr.Addr()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	rels, from := s.saw(dhcpv4.MessageTypeRelease)
	if len(rels) != 1 || s.holds(first.Addr.Addr()) {
		t.Fatalf("server saw %d RELEASEs and still holds %s: want the lease freed", len(rels), first.Addr)
	}
	if u, ok := from[0].(*net.UDPAddr); !ok || !u.IP.Equal(first.Addr.Addr().AsSlice()) || !rels[0].ClientIPAddr.Equal(first.Addr.Addr().AsSlice()) {
		t.Errorf("RELEASE from %s with ciaddr %s, want both %s", from[0], rels[0].ClientIPAddr, first.Addr.Addr())
	}
}

func TestNAK(t *testing.T) {
	l := newLAN(t)
	s := l.serve(10 * time.Second)
	c := l.client()
	r := Request{Parent: lanParent, MAC: mac(1)}
	lease, err := c.Acquire(ctxFor(t, 10*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	s.set(func() { s.nak = true })
	_, err = c.Renew(ctxFor(t, 10*time.Second), lease, r)
	if !errors.Is(err, ErrNAK) || !strings.Contains(err.Error(), "test server says no") || !strings.Contains(err.Error(), lease.Addr.Addr().String()) {
		t.Fatalf("Renew refused by the server: %v, want ErrNAK with the server's message and the address", err)
	}
	_, err = c.Acquire(ctxFor(t, 10*time.Second), Request{Parent: lanParent, MAC: mac(2)})
	if !errors.Is(err, ErrNAK) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("Acquire refused by the server: %v, want ErrNAK", err)
	}
}

func TestNoServer(t *testing.T) {
	l := newLAN(t)
	c := l.client()
	r := Request{Parent: lanParent, MAC: mac(7), ClientID: ClientIDFromName("ep7")}
	start := time.Now()
	_, err := c.Acquire(ctxFor(t, 1500*time.Millisecond), r)
	took := time.Since(start)
	if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with no server: %v, want ErrNoAnswer", err)
	}
	for _, want := range []string{"no DHCP server answered", lanParent, mac(7).String(), "00657037"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > 2500*time.Millisecond {
		t.Errorf("Acquire took %s with a 1.5s context", took)
	}
	_, err = c.Acquire(ctxFor(t, time.Second), Request{Parent: "nosuch0", MAC: mac(7)})
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("Acquire on a missing parent: %v, want an error naming it", err)
	}
}

// TestUnicastToMacvlanChildIsMissed is the kernel fact the BROADCAST flag
// is for. A server that ignores it unicasts the OFFER to the endpoint's
// MAC. With the endpoint's macvlan link in a container's namespace, the
// macvlan handler hands the frame to the link there and the client's
// ETH_P_IP socket on the parent drops it (packet_rcv delivers only in
// the namespace of the receiving device), though the frame is on the
// parent (an ETH_P_ALL tap, which runs before the handler, sees it).
// While the link is still in the parent's namespace (or absent: a veth
// takes any MAC; a real NIC would filter it out), the unicast reaches
// the client.
func TestUnicastToMacvlanChildIsMissed(t *testing.T) {
	l := newLAN(t)
	s := l.serve(10 * time.Second)
	m := mac(9)
	s.set(func() { s.unicastTo = func(netip.Addr) string { return m.String() } })
	c := l.client()
	r := Request{Parent: lanParent, MAC: m}
	if _, err := c.Acquire(ctxFor(t, 3*time.Second), r); err != nil {
		t.Fatalf("without a macvlan child, the unicast reply should reach the parent's socket: %v", err)
	}
	child := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv9", ParentIndex: l.near.LinkIndex(lanParent), HardwareAddr: m}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := l.near.NL.LinkAdd(child); err != nil {
		t.Fatalf("add macvlan child: %v", err)
	}
	l.near.Up("mv9")
	if _, err := c.Acquire(ctxFor(t, 3*time.Second), r); err != nil {
		t.Fatalf("with the macvlan child in the parent's namespace, the unicast reply should reach the parent's socket: %v", err)
	}
	container := itest.NewNetns(t)
	if err := l.near.NL.LinkSetNsFd(l.near.MustLink("mv9"), int(container.Handle())); err != nil {
		t.Fatalf("move mv9 into the container's namespace: %v", err)
	}
	container.Up("mv9")
	tap := newTap(t, l, m)
	_, err := c.Acquire(ctxFor(t, 1500*time.Millisecond), r)
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("with a macvlan child of MAC %s in a container, Acquire %v; want no answer (the child takes unicasts to its MAC)", m, err)
	}
	if !waitFor(func() bool { return tap.count() > 0 }) { // the capture, awaited
		t.Fatalf("the ETH_P_ALL tap saw no unicast to %s: the server did not send it, the test proves nothing", m)
	}
	t.Logf("the ETH_P_ALL tap saw %d unicast frames to %s that the client's socket missed", tap.count(), m)
	s.set(func() { s.unicastTo = nil }) // the server honours the flag: the parent gets the broadcast
	if _, err := c.Acquire(ctxFor(t, 3*time.Second), r); err != nil {
		t.Fatalf("with the child in a container and broadcast replies: %v", err)
	}
}
