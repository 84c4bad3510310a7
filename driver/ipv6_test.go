package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// fakeLeases6 is a DHCPv6 server in a box: 2001:db8:60::100 up, valid
// 120 s (T1 60 s, T2 96 s) on the fixture's clock, by DUID and IAID;
// silent makes it not answer, unbound makes renewals say NoBinding.
type fakeLeases6 struct {
	mu       sync.Mutex
	now      func() time.Time
	next     int
	byClient map[string]netip.Addr
	requests []dhcp6.Request
	renewals []string // "renew ADDR" or "rebind ADDR"
	released []netip.Addr
	silent   bool
	unbound  bool
	declined []netip.Addr
	// during, if set, runs in each Renew and Rebind before it answers.
	during func()
	// same offers every client this address (a rogue server).
	same netip.Addr
}

func (f *fakeLeases6) lease(a netip.Addr, r dhcp6.Request) dhcp6.Lease {
	return dhcp6.Lease{Addr: a, IAID: r.IAID, ServerID: []byte{0, 3, 0, 1, 2, 0, 0, 0, 0, 0x60}, Acquired: f.now(),
		T1: 60 * time.Second, T2: 96 * time.Second, Preferred: 120 * time.Second, Valid: 120 * time.Second}
}

func (f *fakeLeases6) Acquire(_ context.Context, r dhcp6.Request) (dhcp6.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
	if f.silent {
		return dhcp6.Lease{}, fmt.Errorf("Solicit: %w", dhcp6.ErrNoAnswer)
	}
	if f.same.IsValid() {
		return f.lease(f.same, r), nil
	}
	key := fmt.Sprintf("%x/%x", r.DUID, r.IAID)
	a, ok := f.byClient[key]
	if !ok {
		a = netip.MustParseAddr(fmt.Sprintf("2001:db8:60::%x", 0x100+f.next))
		f.next++
		f.byClient[key] = a
	}
	return f.lease(a, r), nil
}

func (f *fakeLeases6) extend(verb string, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewals = append(f.renewals, verb+" "+l.Addr.String())
	if f.during != nil {
		f.during()
	}
	switch {
	case f.silent:
		return dhcp6.Lease{}, fmt.Errorf("%s: %w", verb, dhcp6.ErrNoAnswer)
	case f.unbound:
		return dhcp6.Lease{}, fmt.Errorf("%s: %w", verb, dhcp6.ErrNoBinding)
	}
	return f.lease(l.Addr, r), nil
}

func (f *fakeLeases6) Renew(_ context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error) {
	return f.extend("renew", l, r)
}

func (f *fakeLeases6) Rebind(_ context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error) {
	return f.extend("rebind", l, r)
}

// Decline forgets the client's address, as a server marks a declined
// address unavailable: the client's next Solicit gets another one.
func (f *fakeLeases6) Decline(_ context.Context, l dhcp6.Lease, r dhcp6.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.declined = append(f.declined, l.Addr)
	delete(f.byClient, fmt.Sprintf("%x/%x", r.DUID, r.IAID))
	return nil
}

func (f *fakeLeases6) Release(_ context.Context, l dhcp6.Lease, _ dhcp6.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, l.Addr)
	return nil
}

// lan6Fixture is a driver with a DHCPv6 server in a box and the LAN's
// link lan0.
func lan6Fixture(t *testing.T) (*fixture, *fakeLeases6) {
	f := newFixture(t)
	fl := &fakeLeases6{now: f.clock.Now, byClient: map[string]netip.Addr{}}
	f.close()
	f.dhcp6 = fl
	f.open()
	f.k.AddLink(kernel.Link{Name: "lan0", Kind: "device", MTU: 1500, MAC: "02:00:00:00:00:aa"})
	return f, fl
}

// lan6Net is a CreateNetwork as the current engine sends it for
// `docker network create --ipv6 --ipam-driver null -o parent=lan0 -o
// ipv6_mode=MODE` (IPv4: the null IPAM's pool; kv adds options).
func lan6Net(id, mode string, kv ...string) *network.CreateNetworkRequest {
	generic := map[string]any{"parent": "lan0", "ipv6_mode": mode}
	for i := 0; i+1 < len(kv); i += 2 {
		generic[kv[i]] = kv[i+1]
	}
	return &network.CreateNetworkRequest{NetworkID: id, Options: map[string]any{config.LabelGeneric: generic, "com.docker.network.enable_ipv6": true},
		IPv4Data: []*network.IPAMData{{AddressSpace: "null", Pool: "0.0.0.0/0"}},
		IPv6Data: []*network.IPAMData{{AddressSpace: "null", Pool: "::/0"}}}
}

func TestSLAACEndpointAnswersItsLinkLocal(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "slaac")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	resp, err := f.endpoint(netA, ep1, "", "52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface == nil || resp.Interface.AddressIPv6 != "fe80::5054:ff:fe12:3456/64" || resp.Interface.Address != "" {
		t.Fatalf("CreateEndpoint answered %+v, want only the link-local fe80::5054:ff:fe12:3456/64", resp.Interface)
	}
	// A generated MAC: the answer is that MAC's link-local address.
	const ep2 = "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	resp, err = f.endpoint(netA, ep2, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ll, _ := plan.SLAACAddress(mustMAC(t, resp.Interface.MacAddress))
	if resp.Interface.AddressIPv6 != ll {
		t.Fatalf("CreateEndpoint answered %+v, want the link-local %s of its MAC", resp.Interface, ll)
	}
	if len(fl.requests) != 0 {
		t.Fatalf("a slaac network asked a DHCPv6 server: %v", fl.requests)
	}
	_, err = f.d.CreateEndpoint(ctx, &network.CreateEndpointRequest{NetworkID: netA, EndpointID: ep1[:63] + "9",
		Interface: &network.EndpointInterface{AddressIPv6: "2001:db8:1::5/64"}})
	wantErr(t, err, pluginapi.ErrInvalid, "2001:db8:1::5/64", "ipv6_mode=slaac", "--ip6")
}

func TestDHCPv6LeaseRenewRelease(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	resp, err := f.endpoint(netA, ep1, "", "52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface == nil || resp.Interface.AddressIPv6 != "2001:db8:60::100/128" {
		t.Fatalf("CreateEndpoint answered %+v, want the leased 2001:db8:60::100/128", resp.Interface)
	}
	r := fl.requests[0]
	if r.Parent != "lan0" || r.MAC.String() != "52:54:00:12:34:56" || string(r.DUID) != string(dhcp6.DUIDFromMAC(r.MAC)) || r.IAID != dhcp6.EndpointIAID(ep1) {
		t.Fatalf("lease asked for with %+v, want lan0, the endpoint's MAC, its DUID-LL and IAID", r)
	}
	// The lease is durable: after a restart it is renewed at T1, with the same identity.
	f.restart()
	loop, stop := context.WithCancel(ctx)
	if err := f.d.RunLeases(loop); err != nil {
		t.Fatal(err)
	}
	ep, _, _ := f.endpointRecord(netA, ep1)
	if ep.Lease6 == nil || ep.Lease6.Addr != "2001:db8:60::100" || ep.IPv6 != "2001:db8:60::100/128" {
		t.Fatalf("record after a restart: %+v", ep)
	}
	k := leases.Key{Network: netA, Endpoint: ep1}
	if at, ok := f.d.leases.V6.Timers().Due(k); !ok || !at.Equal(ep.Lease6.Acquired.Add(60*time.Second)) {
		t.Fatalf("after a restart the lease is due at %v (%v), want T1 %v", at, ok, ep.Lease6.Acquired.Add(60*time.Second))
	}
	stop() // the renewals below are the test's, one at a time
	f.d.leases.V6.Wait()
	f.clock.Advance(61 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	f.clock.Advance(40 * time.Second) // past T2 of the first lease, not of the renewed one
	f.d.leases.V6.Renew(ctx, k)
	if len(fl.renewals) != 1 || fl.renewals[0] != "renew 2001:db8:60::100" {
		t.Fatalf("renewals %v, want one Renew at T1 and nothing before the new T1", fl.renewals)
	}
	if ep, _, _ := f.endpointRecord(netA, ep1); !ep.Lease6.Acquired.Equal(f.clock.Now().Add(-40 * time.Second)) {
		t.Fatalf("the renewed lease is not recorded: %+v", ep.Lease6)
	}
	// A silent server past T2: Rebind.
	fl.silent = true
	f.clock.Advance(60 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	if last := fl.renewals[len(fl.renewals)-1]; last != "rebind 2001:db8:60::100" {
		t.Fatalf("past T2 the client sent %q, want a Rebind", last)
	}
	fl.silent = false
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2001:db8:60::100 given back (in the background)", func() bool {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return len(fl.released) == 1 && fl.released[0] == netip.MustParseAddr("2001:db8:60::100")
	})
	if _, ok := f.d.leases.V6.Timers().Due(k); ok {
		t.Fatal("a deleted endpoint's lease is still scheduled")
	}
}

func TestDHCPv6LostLeaseAsksForTheSameAddress(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "dhcp", "true")); err == nil {
		t.Fatal("a dhcp=true network was created without a DHCP client")
	}
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", "52:54:00:12:34:56"); err != nil {
		t.Fatal(err)
	}
	k := leases.Key{Network: netA, Endpoint: ep1}
	fl.unbound = true
	fl.byClient = map[string]netip.Addr{} // the server forgot it: it would offer another address
	fl.next = 7
	f.clock.Advance(61 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	ep, _, _ := f.endpointRecord(netA, ep1)
	if ep.Lease6.Lost.IsZero() || ep.IPv6 != "2001:db8:60::100/128" {
		t.Fatalf("after NoBinding the record is %+v, want the lease marked lost and the address kept", ep.Lease6)
	}
	if len(fl.released) != 1 || fl.released[0].String() != "2001:db8:60::107" {
		t.Fatalf("released %v: another address offered for a lost one must be given back", fl.released)
	}
	if h := fl.requests[len(fl.requests)-1].Hint; h.String() != "2001:db8:60::100" {
		t.Fatalf("the lost address was asked for again with hint %v", h)
	}
	// The server offers it again: won back.
	fl.byClient = map[string]netip.Addr{fmt.Sprintf("%x/%x", dhcp6.DUIDFromMAC(mustMAC(t, "52:54:00:12:34:56")), dhcp6.EndpointIAID(ep1)): netip.MustParseAddr("2001:db8:60::100")}
	f.clock.Advance(30 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	if ep, _, _ := f.endpointRecord(netA, ep1); !ep.Lease6.Lost.IsZero() {
		t.Fatalf("the address offered again was not won back: %+v", ep.Lease6)
	}
}

func TestDHCPv6NoServer(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6")); err != nil {
		t.Fatal(err)
	}
	fl.silent = true
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	_, err := f.endpoint(netA, ep1, "", "")
	if err == nil || !errors.Is(err, dhcp6.ErrNoAnswer) {
		t.Fatalf("CreateEndpoint without a DHCPv6 server: %v", err)
	}
	wantErr(t, err, dhcp6.ErrNoAnswer, "lan0", "no DHCPv6 lease", "ipv6_mode=slaac")
	if _, ok, _ := f.endpointRecord(netA, ep1); ok {
		t.Fatal("an endpoint without a lease was recorded")
	}
}

func TestDHCPv6OnIpvlanUsesTheParentsMAC(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "type", "ipvlan")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	const ep2 = "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	for _, ep := range []string{ep1, ep2} {
		if _, err := f.endpoint(netA, ep, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	a, b := fl.requests[0], fl.requests[1]
	if a.MAC.String() != "02:00:00:00:00:aa" || b.MAC.String() != "02:00:00:00:00:aa" ||
		string(a.DUID) != string(dhcp6.EndpointDUID(ep1)) || string(b.DUID) != string(dhcp6.EndpointDUID(ep2)) {
		t.Fatalf("ipvlan requests %+v and %+v: want the parent's MAC and a DUID per endpoint", a, b)
	}
	e1, _, _ := f.endpointRecord(netA, ep1)
	e2, _, _ := f.endpointRecord(netA, ep2)
	if e1.IPv6 == e2.IPv6 {
		t.Fatalf("two ipvlan endpoints share %s", e1.IPv6)
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// endpointRecord reads an endpoint's record.
func (f *fixture) endpointRecord(netID, epID string) (record.Endpoint, bool, error) {
	var ep record.Endpoint
	var ok bool
	err := f.db.View(func(tx *store.Tx) (err error) {
		ep, ok, err = tx.Endpoint(netID, epID)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return ep, ok, err
}

// slaac with Docker's IPAM (`--ipv6 --subnet V4 --subnet V6 -o
// ipv6_mode=slaac`): CreateEndpoint keeps the addresses Docker gave
// (answers none), and Join answers the IPv4 gateway but no IPv6 one (the
// default route comes from the LAN's router advertisements).
func TestSLAACWithDockersIPAM(t *testing.T) {
	f, _ := lan6Fixture(t)
	ctx := context.Background()
	req := lan6Net(netA, "slaac")
	req.IPv4Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "198.18.6.0/24", Gateway: "198.18.6.1/24"}}
	req.IPv6Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "2001:db8:6a::/64", Gateway: "2001:db8:6a::1/64"}}
	if err := f.d.CreateNetwork(ctx, req); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	resp, err := f.d.CreateEndpoint(ctx, &network.CreateEndpointRequest{NetworkID: netA, EndpointID: ep1,
		Interface: &network.EndpointInterface{Address: "198.18.6.2/24", AddressIPv6: "2001:db8:6a::2/64"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface != nil && (resp.Interface.Address != "" || resp.Interface.AddressIPv6 != "") {
		t.Fatalf("CreateEndpoint answered addresses %+v: want Docker's kept", resp.Interface)
	}
	j, err := f.join(netA, ep1)
	if err != nil {
		t.Fatal(err)
	}
	if j.Gateway != "198.18.6.1" || j.GatewayIPv6 != "" {
		t.Fatalf("Join answered gateways %q and %q: want 198.18.6.1 and no IPv6 one (the router's advertisements give it)", j.Gateway, j.GatewayIPv6)
	}
}

// An offered IPv6 address another endpoint of this daemon holds is
// declined and another asked for; a server offering only such addresses
// (a rogue one offering everyone the same) gets MaxDeclines Declines and
// the create a 409 naming each and the holder, nothing recorded.
func TestDHCPv6OfferHeldElsewhereIsDeclined(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "address_probe", "0")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	const ep2 = "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	const ep3 = "e3e3e3e3e3e30000000000000000000000000000000000000000000000000003"
	if _, err := f.endpoint(netA, ep1, "", "52:54:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	held := netip.MustParseAddr("2001:db8:60::100")
	// The server offers ep2 what ep1 holds first, then another address.
	fl.mu.Lock()
	fl.byClient[fmt.Sprintf("%x/%x", dhcp6.DUIDFromMAC(mustMAC(t, "52:54:00:00:00:02")), dhcp6.EndpointIAID(ep2))] = held
	fl.mu.Unlock()
	resp, err := f.endpoint(netA, ep2, "", "52:54:00:00:00:02")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface.AddressIPv6 == held.String()+"/128" || len(fl.declined) != 1 || fl.declined[0] != held {
		t.Fatalf("ep2 answered %s, declined %v: want %s declined and another address", resp.Interface.AddressIPv6, fl.declined, held)
	}
	// A rogue server offering everyone ep1's address.
	fl.mu.Lock()
	fl.same, fl.declined = held, nil
	fl.mu.Unlock()
	_, err = f.endpoint(netA, ep3, "", "52:54:00:00:00:03")
	wantErr(t, err, pluginapi.ErrConflict, "2001:db8:60::100", "endpoint e1e1e1e1e1e1", "declined", "DHCPv6")
	if len(fl.declined) != plan.MaxDeclines {
		t.Fatalf("declined %v, want %d Declines", fl.declined, plan.MaxDeclines)
	}
	if _, ok, _ := f.endpointRecord(netA, ep3); ok {
		t.Fatal("an endpoint without a free address was recorded")
	}
	// The claim of a recorded endpoint's address ends with its create:
	// once ep1 is gone its address can be taken again.
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	resp, err = f.endpoint(netA, ep3, "", "52:54:00:00:00:03")
	if err != nil || resp.Interface.AddressIPv6 != held.String()+"/128" {
		t.Fatalf("after ep1 went, ep3 answered %+v, %v: want %s", resp, err, held)
	}
}

// Review regression: a renewal whose exchange ends while another request
// holds the endpoint's lock past the exchange's deadline still records the
// renewed lease (the commit waits for the lock) and keeps it scheduled.
func TestDHCPv6RenewalCommitOutlivesItsExchange(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "address_probe", "0")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", "52:54:00:12:34:56"); err != nil {
		t.Fatal(err)
	}
	k := leases.Key{Network: netA, Endpoint: ep1}
	before, _, _ := f.endpointRecord(netA, ep1)
	held := make(chan struct{})
	fl.during = func() {
		go func() {
			_, unlock, _, _, err := f.d.locks.Endpoint(ctx, f.d.store, netA, ep1)
			close(held)
			if err == nil {
				time.Sleep(500 * time.Millisecond)
				unlock()
			}
		}()
		<-held
	}
	f.clock.Advance(61 * time.Second)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	f.d.leases.V6.Renew(rctx, k)
	after, _, _ := f.endpointRecord(netA, ep1)
	if after.Lease6 == nil || !after.Lease6.Acquired.After(before.Lease6.Acquired) {
		t.Fatalf("the renewed lease was not recorded: before %+v, after %+v", before.Lease6, after.Lease6)
	}
	if _, ok := f.d.leases.V6.Timers().Due(k); !ok {
		t.Fatal("the renewed lease is scheduled nowhere")
	}
}

// dhcpv6 on an IPv4 network of Docker's IPAM without --ipv6 (a current
// engine: it sends com.docker.network.enable_ipv4 and keeps IPv6 on an
// interface the driver gives an IPv6 address): CreateEndpoint answers the
// leased /128 only (Docker's IPv4 address stays), Join the pool's IPv4
// gateway and no IPv6 one.
func TestDHCPv6OnAnIPv4NetworkOfDockersIPAM(t *testing.T) {
	f, _ := lan6Fixture(t)
	ctx := context.Background()
	req := lan6Net(netA, "dhcpv6", "address_probe", "0")
	delete(req.Options, "com.docker.network.enable_ipv6")
	req.Options[config.LabelEnableIPv4] = true
	req.IPv4Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "198.18.6.0/24", Gateway: "198.18.6.1/24"}}
	req.IPv6Data = nil
	if err := f.d.CreateNetwork(ctx, req); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	resp, err := f.d.CreateEndpoint(ctx, &network.CreateEndpointRequest{NetworkID: netA, EndpointID: ep1,
		Interface: &network.EndpointInterface{Address: "198.18.6.2/24", MacAddress: "52:54:00:12:34:56"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Interface == nil || resp.Interface.Address != "" || resp.Interface.AddressIPv6 != "2001:db8:60::100/128" {
		t.Fatalf("CreateEndpoint answered %+v: want the leased 2001:db8:60::100/128 only", resp.Interface)
	}
	j, err := f.join(netA, ep1)
	if err != nil {
		t.Fatal(err)
	}
	if j.Gateway != "198.18.6.1" || j.GatewayIPv6 != "" {
		t.Fatalf("Join answered gateways %q and %q: want 198.18.6.1 and no IPv6 one", j.Gateway, j.GatewayIPv6)
	}
}
