package driver

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

func TestLeaseState(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := record.Lease{Acquired: t0, T1: t0.Add(60 * time.Second), T2: t0.Add(105 * time.Second), Expiry: t0.Add(120 * time.Second)}
	lost := l
	lost.Lost = t0.Add(10 * time.Second)
	for _, tc := range []struct {
		l    record.Lease
		at   time.Duration
		want string
	}{
		{l, 0, record.LeaseBound}, {l, 60 * time.Second, record.LeaseRenewing}, {l, 105 * time.Second, record.LeaseRebinding},
		{l, 120 * time.Second, record.LeaseLost}, {lost, 20 * time.Second, record.LeaseLost},
	} {
		if got := tc.l.State(t0.Add(tc.at)); got != tc.want {
			t.Errorf("at %s: %s, want %s", tc.at, got, tc.want)
		}
	}
}

func (f *fixture) lease(netID, epID string) *record.Lease {
	var ep record.Endpoint
	_ = f.db.View(func(tx *store.Tx) (err error) { ep, _, err = tx.Endpoint(netID, epID); return err })
	return ep.Lease
}

func (f *fixture) blocked() []netlinkutil.Blocked {
	b, _ := f.k.BlockedAddrs(context.Background(), f.d.mark)
	return b
}

// A lease the server refuses is lost: recorded, its address blocked on the
// parent, only that address asked for again (another offered is not
// taken), and unblocked once won back. Deleting the endpoint of a lost
// lease releases nothing (the address is not ours) and removes the block.
func TestDHCPLostLeaseIsBlockedUntilWonBack(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("198.18.180.100")
	// The server refuses the renewal and has given the address to another
	// host meanwhile.
	fl.mu.Lock()
	fl.nak = true
	fl.byClient = map[string]string{"another-host": "198.18.180.100/24"}
	fl.mu.Unlock()
	f.clock.Advance(61 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	l := f.lease(netA, ep1)
	if l == nil || l.Lost.IsZero() || l.Addr != "198.18.180.100/24" || l.State(f.clock.Now()) != record.LeaseLost {
		t.Fatalf("after the NAK the lease is %+v, want lost, same address", l)
	}
	want := []netlinkutil.Blocked{{Parent: "lan0", Addr: addr, Tag: f.d.mark}}
	if fmt.Sprint(f.blocked()) != fmt.Sprint(want) {
		t.Fatalf("blocked %v, want %v", f.blocked(), want)
	}
	last := fl.requests[len(fl.requests)-1]
	if last.Only != addr {
		t.Fatalf("the lost lease was asked for with Only %v, want %s only", last.Only, addr)
	}
	if len(fl.released) != 0 {
		t.Fatalf("released %v: another offered address was requested and given back", fl.released)
	}
	// Still taken 30 s later: still lost, still blocked.
	f.clock.Advance(30 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if l := f.lease(netA, ep1); l.Lost.IsZero() || len(f.blocked()) != 1 {
		t.Fatalf("lost lease won back while another host holds it: %+v, blocked %v", l, f.blocked())
	}
	// The other host lets it go: won back, unblocked.
	fl.mu.Lock()
	fl.byClient = map[string]string{}
	fl.nak = false
	fl.mu.Unlock()
	f.clock.Advance(30 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if l := f.lease(netA, ep1); l == nil || !l.Lost.IsZero() || l.Addr != "198.18.180.100/24" || len(f.blocked()) != 0 {
		t.Fatalf("after the server gave it back: lease %+v, blocked %v", l, f.blocked())
	}
	// Lost again by expiry (a silent server), then the endpoint deleted.
	fl.mu.Lock()
	fl.silent = true
	fl.mu.Unlock()
	f.clock.Advance(3 * time.Minute)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if l := f.lease(netA, ep1); l.Lost.IsZero() || len(f.blocked()) != 1 {
		t.Fatalf("an expired lease: %+v, blocked %v", l, f.blocked())
	}
	// A restart after a reboot (blocks gone) blocks it again.
	_ = f.k.Unblock(ctx, "lan0", addr, f.d.mark)
	f.restart()
	f.d.leases.V4.Family = leases.DHCP{Client: fl}
	if err := f.d.RunLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.blocked()) != 1 {
		t.Fatalf("after a restart the lost lease's address is not blocked: %v", f.blocked())
	}
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	if len(fl.released) != 0 || len(f.blocked()) != 0 {
		t.Fatalf("deleting a lost lease's endpoint: released %v (not ours), blocked %v", fl.released, f.blocked())
	}
}

// A renewal waiting on a server that ignores REQUESTs holds no lock:
// DeleteEndpoint answers at once and cancels it, and the renewal commits
// nothing for the deleted endpoint.
func TestDHCPDeleteDoesNotWaitForARenewal(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, "dhcp_timeout", "20s")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	fl.hang = true
	fl.mu.Unlock()
	f.clock.Advance(61 * time.Second)
	k := leases.Key{Network: netA, Endpoint: ep1}
	f.d.leases.V4.Timers().Set(k, f.clock.Now())
	due, _ := f.d.leases.V4.Timers().Next(f.clock.Now()) // in flight, as the loop takes it
	if len(due) != 1 {
		t.Fatalf("due %v", due)
	}
	done := make(chan struct{})
	go func() { defer close(done); f.d.leases.V4.Renew(ctx, k) }()
	for {
		fl.mu.Lock()
		n := fl.renewals
		fl.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("DeleteEndpoint took %s behind a renewal", took)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal was not cancelled by the deletion")
	}
	if l := f.lease(netA, ep1); l != nil {
		t.Fatalf("the cancelled renewal wrote a lease for the deleted endpoint: %+v", l)
	}
}

// A kill -9 between the lease's exchange and the endpoint's commit, or
// after the commit that deleted the endpoint: the next start releases the
// lease the journal kept; a lease an endpoint's record holds is only
// forgotten from the journal.
func TestDHCPJournaledLeasesReleasedAtStart(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err != nil {
		t.Fatal(err)
	}
	const ep1, ep2 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001", "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	var pending []record.PendingRelease
	_ = f.db.View(func(tx *store.Tx) (err error) { pending, err = tx.PendingReleases(); return err })
	if len(pending) != 0 {
		t.Fatalf("a committed endpoint's lease is still in the journal: %+v", pending)
	}
	// The crash: ep2's lease acquired and journaled, its record never
	// committed (the crash point create-endpoint/before-commit).
	f.killedAt("create-endpoint/before-commit", func() { _, _ = f.endpoint(netA, ep2, "", "") })
	_ = f.db.View(func(tx *store.Tx) (err error) { pending, err = tx.PendingReleases(); return err })
	if len(pending) != 1 || pending[0].EndpointID != ep2 {
		t.Fatalf("journal %+v, want ep2's lease", pending)
	}
	f.restart()
	f.d.leases.V4.Family = leases.DHCP{Client: fl}
	if err := f.d.RunLeases(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crashed create's lease released", func() bool {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return len(fl.released) == 1 && fl.released[0] == pending[0].Lease.Addr
	})
	waitFor(t, "the journal emptied", func() bool {
		var p []record.PendingRelease
		_ = f.db.View(func(tx *store.Tx) (err error) { p, err = tx.PendingReleases(); return err })
		return len(p) == 0
	})
	// Deleted, and killed after the commit: released at the next start.
	f.killedAt("delete-endpoint/after-commit", func() { _ = f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}) })
	fl.mu.Lock()
	before := len(fl.released)
	fl.mu.Unlock()
	f.restart()
	f.d.leases.V4.Family = leases.DHCP{Client: fl}
	if err := f.d.RunLeases(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted endpoint's lease released at start", func() bool {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return len(fl.released) == before+1 && fl.released[before] == "198.18.180.100/24"
	})
}

// Review regressions: a renewal whose context ends at the server's ACK
// (shutdown) still records the renewed lease and releases nothing; an
// expired lease whose request cannot be made (an ipvlan parent gone) is
// marked lost and blocked, and not retried in a hot loop.
func TestDHCPRenewalEdgeCases(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(61 * time.Second)
	rctx, cancel := context.WithCancel(ctx)
	fl.mu.Lock()
	fl.onRenew = cancel // the daemon stops while the ACK comes in
	fl.mu.Unlock()
	f.d.leases.V4.Renew(rctx, leases.Key{Network: netA, Endpoint: ep1})
	if l := f.lease(netA, ep1); l == nil || !l.Expiry.Equal(f.clock.Now().Add(120*time.Second)) || len(fl.released) != 0 {
		t.Fatalf("after a renewal at shutdown: lease %+v, released %v; want the renewed lease recorded and nothing released", l, fl.released)
	}

	if err := f.d.CreateNetwork(ctx, dhcpNet(netB, "type", "ipvlan")); err != nil {
		t.Fatal(err)
	}
	const ep2 = "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	if _, err := f.endpoint(netB, ep2, "", ""); err != nil {
		t.Fatal(err)
	}
	f.k.Remove("lan0") // the ipvlan request needs the parent's MAC
	f.clock.Advance(5 * time.Minute)
	k := leases.Key{Network: netB, Endpoint: ep2}
	f.d.leases.V4.Renew(ctx, k)
	if l := f.lease(netB, ep2); l == nil || l.Lost.IsZero() {
		t.Fatalf("an expired lease whose request failed: %+v, want it lost", l)
	}
	if len(f.blocked()) == 0 {
		t.Fatal("the lost lease's address is not blocked")
	}
	due, _ := f.d.leases.V4.Timers().Due(k)
	if due.Sub(f.clock.Now()) < time.Second {
		t.Fatalf("rescheduled %s after now: a hot loop", due.Sub(f.clock.Now()))
	}
}

// An owned VLAN an operator renamed while a lease on it is lost: the
// follow moves the block to the new name with the network, and winning
// the lease back removes it there.
func TestDHCPLostLeaseBlockFollowsARenamedOwnedVLAN(t *testing.T) {
	f, fl := dhcpFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA, "parent", "lan0.10")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("198.18.180.100")
	fl.mu.Lock()
	fl.nak = true
	fl.byClient = map[string]string{"another-host": "198.18.180.100/24"}
	fl.mu.Unlock()
	f.clock.Advance(61 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if want := []netlinkutil.Blocked{{Parent: "lan0.10", Addr: addr, Tag: f.d.mark}}; fmt.Sprint(f.blocked()) != fmt.Sprint(want) {
		t.Fatalf("blocked %v, want %v", f.blocked(), want)
	}
	if err := f.d.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.k.Rename("lan0.10", "mine"); err != nil {
		t.Fatal(err)
	}
	want := []netlinkutil.Blocked{{Parent: "mine", Addr: addr, Tag: f.d.mark}}
	waitFor(t, "the block to follow the renamed VLAN", func() bool {
		n, _ := f.record(netA)
		return n.Parent == "mine" && fmt.Sprint(f.blocked()) == fmt.Sprint(want)
	})
	fl.mu.Lock()
	fl.byClient = map[string]string{}
	fl.nak = false
	fl.mu.Unlock()
	f.clock.Advance(30 * time.Second)
	f.d.leases.V4.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if l := f.lease(netA, ep1); l == nil || !l.Lost.IsZero() || len(f.blocked()) != 0 {
		t.Fatalf("after the server gave it back: lease %+v, blocked %v", l, f.blocked())
	}
}
