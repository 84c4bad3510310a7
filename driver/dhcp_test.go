package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// fakeLeases is a DHCP server in a box: addresses .100 up in
// 198.18.180.0/24, leases of 120 s (T1 60 s, T2 105 s) on the fixture's
// clock; nak makes renewals fail with a NAK, silent makes it not answer.
type fakeLeases struct {
	mu       sync.Mutex
	now      func() time.Time
	next     int
	byClient map[string]string
	requests []leases.Request
	released []string
	renewals int
	nak      bool
	silent   bool
	hang     bool
	declined []string
	taken    map[string]bool
	// same offers every client the same address (a rogue server).
	same   string
	routes []record.LeaseRoute
	// onRenew is called at each renewal's answer.
	onRenew func()
}

func (f *fakeLeases) lease(addr string) record.Lease {
	now := f.now()
	return record.Lease{Addr: addr, Router: "198.18.180.1", ServerID: "198.18.180.1", Routes: f.routes, Acquired: now,
		T1: now.Add(60 * time.Second), T2: now.Add(105 * time.Second), Expiry: now.Add(120 * time.Second)}
}

func (f *fakeLeases) Acquire(ctx context.Context, r leases.Request) (record.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r)
	if f.silent {
		return record.Lease{}, fmt.Errorf("no offer: %w", context.DeadlineExceeded)
	}
	key := r.MAC.String() + "/" + string(r.ClientID)
	if r.Only.IsValid() {
		want := r.Only.String() + "/24"
		if owner, ok := f.holder(want); ok && owner != key {
			return record.Lease{}, fmt.Errorf("offered only 198.18.180.%d/24, not %s", 100+f.next, want)
		}
		f.byClient[key] = want
		return f.lease(want), nil
	}
	if f.same != "" {
		return f.lease(f.same), nil
	}
	if addr, ok := f.byClient[key]; ok {
		return f.lease(addr), nil
	}
	for f.taken[fmt.Sprintf("198.18.180.%d/24", 100+f.next)] {
		f.next++
	}
	addr := fmt.Sprintf("198.18.180.%d/24", 100+f.next)
	if r.Address.IsValid() && !f.holds(r.Address.String()+"/24") { // the address asked for, if free
		addr = r.Address.String() + "/24"
	} else {
		f.next++
	}
	f.byClient[key] = addr
	return f.lease(addr), nil
}

func (f *fakeLeases) holder(addr string) (string, bool) {
	for k, a := range f.byClient {
		if a == addr {
			return k, true
		}
	}
	return "", false
}

func (f *fakeLeases) holds(addr string) bool {
	for _, a := range f.byClient {
		if a == addr {
			return true
		}
	}
	return false
}

func (f *fakeLeases) Renew(ctx context.Context, r leases.Request, l record.Lease) (record.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewals++
	if f.hang { // a server that ignores REQUESTs
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return record.Lease{}, fmt.Errorf("renew %s: %w", l.Addr, ctx.Err())
	}
	if f.nak {
		return record.Lease{}, fmt.Errorf("renew %s: %w", l.Addr, leases.ErrNAK)
	}
	if f.onRenew != nil {
		f.onRenew()
	}
	return f.lease(l.Addr), nil
}

func (f *fakeLeases) Decline(ctx context.Context, r leases.Request, l record.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.declined = append(f.declined, l.Addr)
	for k, a := range f.byClient {
		if a == l.Addr {
			delete(f.byClient, k)
		}
	}
	if f.taken == nil {
		f.taken = map[string]bool{}
	}
	f.taken[l.Addr] = true // a server does not offer a declined address again
	return nil
}

func (f *fakeLeases) Release(ctx context.Context, r leases.Request, l record.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, l.Addr)
	for k, a := range f.byClient {
		if a == l.Addr {
			delete(f.byClient, k)
		}
	}
	return nil
}

func dhcpFixture(t *testing.T) (*fixture, *fakeLeases) {
	f := newFixture(t)
	fl := &fakeLeases{now: f.clock.Now, byClient: map[string]string{}}
	f.d.leases.V4.Family = leases.DHCP{Client: fl}
	f.k.AddLink(kernel.Link{Name: "lan0", Kind: "device", MTU: 1500, MAC: "02:00:00:00:00:aa"})
	return f, fl
}

// dhcpNet is a CreateNetwork as `docker network create --ipam-driver null
// -o parent=lan0 -o dhcp=true` sends it.
func dhcpNet(id string, opts ...string) *network.CreateNetworkRequest {
	generic := map[string]any{"parent": "lan0", "dhcp": "true"}
	for i := 0; i+1 < len(opts); i += 2 {
		generic[opts[i]] = opts[i+1]
	}
	return &network.CreateNetworkRequest{NetworkID: id, Options: map[string]any{config.LabelGeneric: generic},
		IPv4Data: []*network.IPAMData{{AddressSpace: "null", Pool: "0.0.0.0/0"}}}
}

func TestDHCPNetworkOptions(t *testing.T) {
	f, _ := dhcpFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *network.CreateNetworkRequest
		want string
	}{
		{"not a boolean", dhcpNet(netA, "dhcp", "yes please"), `dhcp "yes please" is not a boolean`},
		{"timeout without dhcp", dhcpNet(netA, "dhcp", "false", "dhcp_timeout", "5s"), "applies only with -o dhcp=true"},
		{"bad timeout", dhcpNet(netA, "dhcp_timeout", "soon"), `dhcp_timeout "soon"`},
		{"timeout too short", dhcpNet(netA, "dhcp_timeout", "1ns"), `dhcp_timeout "1ns" is not a duration from 1s to 25s`},
		{"timeout too long", dhcpNet(netA, "dhcp_timeout", "5m"), `dhcp_timeout "5m" is not a duration from 1s to 25s`},
		{"empty dhcp", dhcpNet(netA, "dhcp", ""), "dhcp is given without a value"},
		{"empty timeout", dhcpNet(netA, "dhcp_timeout", ""), "dhcp_timeout is given without a value"},
		{"Docker's IPAM", func() *network.CreateNetworkRequest {
			r := dhcpNet(netA)
			r.IPv4Data = []*network.IPAMData{{AddressSpace: "LocalDefault", Pool: "198.18.1.0/24"}}
			return r
		}(), "--ipam-driver null"},
		{"IPv6", func() *network.CreateNetworkRequest {
			r := dhcpNet(netA)
			r.IPv6Data = []*network.IPAMData{{AddressSpace: "null", Pool: "::/0"}}
			return r
		}(), "IPv4 addresses only"},
		{"ipvlan l3", dhcpNet(netA, "ipvlan_mode", "l3"), "ipvlan_mode=l2"},
		{"host address", dhcpNet(netA, "host_address", "198.18.180.5"), "drop host_address"},
	} {
		err := f.d.CreateNetwork(ctx, tc.req)
		if !errors.Is(err, pluginapi.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
	f.d.leases.V4.Family = leases.DHCP{}
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err == nil || !strings.Contains(err.Error(), "without a DHCP client") {
		t.Errorf("no DHCP client: %v", err)
	}
}

func TestDHCPEndpointLifecycle(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, "dhcp_timeout", "3s")); err != nil {
		t.Fatal(err)
	}
	if err := f.d.CreateNetwork(ctx, dhcpNet(netB)); err != nil {
		t.Fatalf("a second DHCP network on the same parent: %v", err)
	}
	const ep1, ep2 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001", "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	r1, err := f.endpoint(netA, ep1, "", "")
	if err != nil || r1.Interface == nil || r1.Interface.Address != "198.18.180.100/24" || r1.Interface.MacAddress == "" {
		t.Fatalf("CreateEndpoint = %+v, %v: want the leased address and the generated MAC", r1, err)
	}
	if got := fl.requests[0].MAC.String(); got != r1.Interface.MacAddress || len(fl.requests[0].ClientID) != 0 {
		t.Errorf("macvlan lease asked with MAC %s client ID %q, want the endpoint's MAC %s", got, fl.requests[0].ClientID, r1.Interface.MacAddress)
	}
	r2, err := f.endpoint(netA, ep2, "", "")
	if err != nil || r2.Interface.Address != "198.18.180.101/24" {
		t.Fatalf("second endpoint: %+v, %v", r2, err)
	}
	// Docker asking again gets the same lease, not a new one.
	if again, err := f.endpoint(netA, ep1, "", r1.Interface.MacAddress); err != nil || again.Interface == nil || again.Interface.Address != r1.Interface.Address || len(fl.requests) != 2 {
		t.Errorf("replayed CreateEndpoint = %+v, %v (%d requests)", again, err, len(fl.requests))
	}
	fl.routes = []record.LeaseRoute{{Dst: "198.18.190.0/24", Gateway: "198.18.180.254"}}
	j, err := f.join(netA, ep1)
	if err != nil || j.Gateway != "198.18.180.1" {
		t.Fatalf("Join = %+v, %v: want the router as gateway", j, err)
	}
	if _, err := f.endpoint(netA, ep1, "198.18.180.7/24", ""); err == nil || !strings.Contains(err.Error(), "--ipam-driver null") {
		t.Errorf("an address from Docker: %v", err)
	}
	// Renewal at T1 keeps the address and moves the expiry.
	f.clock.Advance(61 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	n, _ := f.record(netA)
	var ep record.Endpoint
	_ = f.db.View(func(tx *store.Tx) (err error) { ep, _, err = tx.Endpoint(n.ID, ep1); return err })
	if fl.renewals != 1 || ep.Lease == nil || ep.Lease.Addr != "198.18.180.100/24" || !ep.Lease.Expiry.Equal(f.clock.Now().Add(120*time.Second)) {
		t.Fatalf("after renewal: %d renewals, lease %+v", fl.renewals, ep.Lease)
	}
	// A NAK: asked again for the same address, which it gets.
	fl.nak = true
	f.clock.Advance(61 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if last := fl.requests[len(fl.requests)-1]; last.Address.String() != "198.18.180.100" {
		t.Errorf("after a NAK the lease was asked for %s, want the same address", last.Address)
	}
	// DeleteEndpoint releases.
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep2}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(fl.released, ",") != "198.18.180.101/24" {
		t.Errorf("released %v, want endpoint 2's address", fl.released)
	}
	// No server: a bounded, clear refusal.
	fl.silent = true
	_, err = f.endpoint(netA, "e3e3e3e3e3e30000000000000000000000000000000000000000000000000003", "", "")
	if err == nil || !strings.Contains(err.Error(), "no lease from a DHCP server on lan0 within dhcp_timeout 3s") {
		t.Errorf("no server: %v", err)
	}
}

func TestDHCPIpvlanUsesClientIDs(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, "type", "ipvlan")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		r, err := f.endpoint(netA, fmt.Sprintf("e%de%de%de%de%de%d0000000000000000000000000000000000000000000000000000", i, i, i, i, i, i), "", "")
		if err != nil || r.Interface == nil || r.Interface.MacAddress != "" || r.Interface.Address != fmt.Sprintf("198.18.180.%d/24", 99+i) {
			t.Fatalf("ipvlan endpoint %d: %+v, %v", i, r, err)
		}
	}
	a, b := fl.requests[0], fl.requests[1]
	if a.MAC.String() != "02:00:00:00:00:aa" || b.MAC.String() != a.MAC.String() || len(a.ClientID) == 0 || string(a.ClientID) == string(b.ClientID) {
		t.Errorf("ipvlan requests %+v and %+v: want the parent's MAC and distinct client IDs", a, b)
	}
}

// A lease that expired is won back with a DISCOVER for the same address;
// deleting the network releases the leases of its endpoints.
func TestDHCPExpiredLeaseAndNetworkDelete(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	r, err := f.endpoint(netA, ep1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	fl.byClient = map[string]string{} // the server forgot it (a restart)
	fl.mu.Unlock()
	f.clock.Advance(3 * time.Minute) // past the expiry
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if fl.renewals != 0 {
		t.Errorf("an expired lease was renewed with a REQUEST (%d), which a server without its record ignores", fl.renewals)
	}
	last := fl.requests[len(fl.requests)-1]
	if last.Address.String()+"/24" != r.Interface.Address {
		t.Errorf("the expired lease was asked for %s, want its own address %s", last.Address, r.Interface.Address)
	}
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	if fl.renewals != 0 || len(fl.released) != 1 || fl.released[0] != r.Interface.Address {
		t.Errorf("deleting the network released %v, want the endpoint's lease %s", fl.released, r.Interface.Address)
	}
	n := f.d.leases.V4.Timers().Scheduled()
	if n != 0 {
		t.Errorf("%d leases still scheduled after the network went", n)
	}
}

func TestNextLeaseAction(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := record.Lease{Acquired: t0, T1: t0.Add(60 * time.Second), T2: t0.Add(105 * time.Second), Expiry: t0.Add(120 * time.Second)}
	for _, tc := range []struct {
		at, want time.Duration
	}{
		{0, 60 * time.Second},
		{59 * time.Second, 60 * time.Second},
		{60 * time.Second, 82*time.Second + 500*time.Millisecond},   // half way to T2
		{100 * time.Second, 102*time.Second + 500*time.Millisecond}, // under 2x10 s to T2: half of it, at least 1 s
		{105 * time.Second, 115 * time.Second},                      // 10 s
		{119 * time.Second, 120 * time.Second},
		{120 * time.Second, 121 * time.Second}, // expired: marked lost a second later at most (never a hot loop)
	} {
		if got := leases.NextAction(l, t0.Add(tc.at)).Sub(t0); got != tc.want {
			t.Errorf("at %s: next at %s, want %s", tc.at, got, tc.want)
		}
	}
	lost := l
	lost.Lost = t0.Add(30 * time.Second) // refused by a NAK before T1
	if got := leases.NextAction(lost, t0.Add(40*time.Second)).Sub(t0); got != 70*time.Second {
		t.Errorf("lost: next at %s, want every 30 s (70s)", got)
	}
}
