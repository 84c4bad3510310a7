package driver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// blockedList is the fake kernel's blocks of this driver, sorted.
func (f *fixture) blockedList() string {
	var s []string
	for _, b := range f.blocked() {
		s = append(s, b.Parent+" "+b.Addr.String())
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// A lost DHCPv6 lease's address is blocked on the parent from the loss
// until it is won back, blocked again after a restart together with a lost
// DHCP lease of the same endpoint (one plan for both families: neither
// start undoes the other's blocks), and unblocked when the endpoint goes,
// nothing released for it (not ours).
func TestDHCPv6LostLeaseIsBlockedUntilWonBack(t *testing.T) {
	f, fl := lan6Fixture(t)
	fl4 := &fakeLeases{now: f.clock.Now, byClient: map[string]string{}}
	f.d.leases.V4.Family = leases.DHCP{Client: fl4}
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "dhcp", "true")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	const mac = "52:54:00:12:34:56"
	if _, err := f.endpoint(netA, ep1, "", mac); err != nil {
		t.Fatal(err)
	}
	k := leases.Key{Network: netA, Endpoint: ep1}
	if got := f.blockedList(); got != "" {
		t.Fatalf("blocked %q before any loss", got)
	}
	// The server no longer has the binding and would offer another address.
	fl.unbound = true
	fl.byClient = map[string]netip.Addr{}
	fl.next = 7
	f.clock.Advance(61 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	if ep, _, _ := f.endpointRecord(netA, ep1); ep.Lease6 == nil || ep.Lease6.Lost.IsZero() {
		t.Fatalf("after NoBinding: %+v, want lost", ep.Lease6)
	}
	if got, want := f.blockedList(), "lan0 2001:db8:60::100"; got != want {
		t.Fatalf("blocked %q after the loss, want %q", got, want)
	}
	// Asked again 30 s later, another address offered: still blocked.
	f.clock.Advance(30 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	if got, want := f.blockedList(), "lan0 2001:db8:60::100"; got != want {
		t.Fatalf("blocked %q while another address is offered, want %q", got, want)
	}
	// Offered again: won back, unblocked.
	fl.byClient = map[string]netip.Addr{fmt.Sprintf("%x/%x", dhcp6.DUIDFromMAC(mustMAC(t, mac)), dhcp6.EndpointIAID(ep1)): netip.MustParseAddr("2001:db8:60::100")}
	fl.unbound = false
	f.clock.Advance(30 * time.Second)
	f.d.leases.V6.Renew(ctx, k)
	if ep, _, _ := f.endpointRecord(netA, ep1); !ep.Lease6.Lost.IsZero() {
		t.Fatalf("not won back: %+v", ep.Lease6)
	}
	if got := f.blockedList(); got != "" {
		t.Fatalf("blocked %q after the address was won back", got)
	}
	// Both leases lost to a silent LAN (expired).
	fl.silent = true
	fl4.mu.Lock()
	fl4.silent = true
	fl4.mu.Unlock()
	f.clock.Advance(5 * time.Minute)
	f.d.leases.V6.Renew(ctx, k)
	f.d.leases.V4.Renew(ctx, k)
	want := "lan0 198.18.180.100, lan0 2001:db8:60::100"
	if got := f.blockedList(); got != want {
		t.Fatalf("blocked %q after both leases expired, want %q", got, want)
	}
	// A reboot (blocks gone) plus a stray block of this instance, then a
	// start: exactly the two lost leases' addresses are blocked.
	for _, b := range f.blocked() {
		_ = f.k.Unblock(ctx, b.Parent, b.Addr, f.d.mark)
	}
	if err := f.k.Block(ctx, "lan0", netip.MustParseAddr("2001:db8:60::999"), f.d.mark); err != nil {
		t.Fatal(err)
	}
	f.restart()
	f.d.leases.V4.Family = leases.DHCP{Client: fl4}
	if err := f.d.RunLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.blockedList(); got != want {
		t.Fatalf("blocked %q after a restart, want %q", got, want)
	}
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}); err != nil {
		t.Fatal(err)
	}
	if got := f.blockedList(); got != "" {
		t.Fatalf("blocked %q after the endpoint was deleted", got)
	}
	if slices.Contains(fl.released, netip.MustParseAddr("2001:db8:60::100")) {
		t.Fatalf("released %v: a lost DHCPv6 lease is not ours to release (only the addresses offered instead are given back)", fl.released)
	}
}

// Deleting the network of an endpoint whose DHCPv6 lease is lost removes
// the block too.
func TestDHCPv6LostLeaseBlockGoesWithTheNetwork(t *testing.T) {
	f, fl := lan6Fixture(t)
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6")); err != nil {
		t.Fatal(err)
	}
	const ep1 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001"
	if _, err := f.endpoint(netA, ep1, "", ""); err != nil {
		t.Fatal(err)
	}
	fl.silent = true
	f.clock.Advance(5 * time.Minute)
	f.d.leases.V6.Renew(ctx, leases.Key{Network: netA, Endpoint: ep1})
	if got := f.blocked(); len(got) != 1 || got[0] != (netlinkutil.Blocked{Parent: "lan0", Addr: netip.MustParseAddr("2001:db8:60::100"), Tag: f.d.mark}) {
		t.Fatalf("blocked %v after expiry", got)
	}
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	if got := f.blocked(); len(got) != 0 {
		t.Fatalf("blocked %v after the network was deleted", got)
	}
}

// The DHCPv6 journal, dual stack: a kill -9 between the leases' exchange
// and the endpoint's commit leaves both leases journaled, and the next
// start releases each with its own client (neither leaser takes the
// other's entries); a kill right after a deletion's commit, likewise,
// its entries marked as a deletion's (the start's line names the case).
func TestDHCPv6JournaledLeasesReleasedAtStart(t *testing.T) {
	f, fl := lan6Fixture(t)
	fl4 := &fakeLeases{now: f.clock.Now, byClient: map[string]string{}}
	f.d.leases.V4.Family = leases.DHCP{Client: fl4}
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, lan6Net(netA, "dhcpv6", "dhcp", "true", "address_probe", "0")); err != nil {
		t.Fatal(err)
	}
	const ep1, ep2 = "e1e1e1e1e1e10000000000000000000000000000000000000000000000000001", "e2e2e2e2e2e20000000000000000000000000000000000000000000000000002"
	if _, err := f.endpoint(netA, ep1, "", "52:54:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	journal := func() []string { // "e1 ADDR" ("e1 ADDR deletion" for a deletion's entry)
		var p []record.PendingRelease
		_ = f.db.View(func(tx *store.Tx) (err error) { p, err = tx.PendingReleases(); return err })
		var out []string
		for _, r := range p {
			e := r.EndpointID[:2] + " " + r.Addr()
			if r.Deletion {
				e += " deletion"
			}
			out = append(out, e)
		}
		slices.Sort(out)
		return out
	}
	if j := journal(); len(j) != 0 {
		t.Fatalf("a committed endpoint's leases are still in the journal: %v", j)
	}
	f.killedAt("create-endpoint/before-commit", func() { _, _ = f.endpoint(netA, ep2, "", "52:54:00:00:00:02") })
	if got, want := fmt.Sprint(journal()), "[e2 198.18.180.101/24 e2 2001:db8:60::101]"; got != want {
		t.Fatalf("journal after the crash %s, want %s", got, want)
	}
	restart := func() {
		f.restart()
		f.d.leases.V4.Family = leases.DHCP{Client: fl4}
		if err := f.d.RunLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
	restart()
	waitFor(t, "the crashed create's leases released, each by its own client", func() bool {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		fl4.mu.Lock()
		defer fl4.mu.Unlock()
		return fmt.Sprint(fl.released) == "[2001:db8:60::101]" && fmt.Sprint(fl4.released) == "[198.18.180.101/24]"
	})
	waitFor(t, "the journal emptied", func() bool { return len(journal()) == 0 })
	// Deleted, and killed right after the commit: released at the next start.
	f.killedAt("delete-endpoint/after-commit", func() { _ = f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: ep1}) })
	if got, want := fmt.Sprint(journal()), "[e1 198.18.180.100/24 deletion e1 2001:db8:60::100 deletion]"; got != want {
		t.Fatalf("journal after the deletion's commit %s, want %s", got, want)
	}
	restart()
	waitFor(t, "the deleted endpoint's leases released at start", func() bool {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return slices.Contains(fl.released, netip.MustParseAddr("2001:db8:60::100"))
	})
	waitFor(t, "the journal emptied again", func() bool { return len(journal()) == 0 })
}
