package dhcp6

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// leaseFileWait is how long a test waits for dnsmasq's lease file to
// show what it answered.
const leaseFileWait = 5 * time.Second

// TestDnsmasq leases, renews, rebinds and releases addresses from a real
// dnsmasq (Debian's dnsmasq-base) over the packet socket: a macvlan-style
// endpoint (its own MAC, no link with it exists, so the client answers
// dnsmasq's Neighbour Solicitation for its link-local address itself) and
// two ipvlan-style endpoints sharing the parent's MAC (told apart by
// their DUIDs; the replies go to the parent's own link-local address).
// It runs as root, in CI too (itest.RequireRoot fails there instead of
// skipping).
func TestDnsmasq(t *testing.T) {
	itest.RequireRoot(t)
	near := itest.NewNetns(t)
	lan := itest.NewLAN6(t, near, "lan6", netip.MustParsePrefix("2001:db8:60::1/64"))
	d := lan.ServeDHCPv6("2001:db8:60::100,2001:db8:60::1ff,64,2m")
	pool := func(a netip.Addr) bool {
		return !a.Less(netip.MustParseAddr("2001:db8:60::100")) && !netip.MustParseAddr("2001:db8:60::1ff").Less(a)
	}
	c := New(WithNetns(near.Handle()))
	ctx := ctxFor(t, 60*time.Second)

	mac := net.HardwareAddr{0x02, 0x42, 0x60, 0x00, 0x00, 0x01}
	r := Request{Parent: lan.Parent, MAC: mac, DUID: DUIDFromMAC(mac), IAID: EndpointIAID("ep-macvlan")}
	start := time.Now()
	l, err := c.Acquire(ctxFor(t, 15*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leased %s (preferred %s, valid %s, T1 %s, T2 %s) in %s", l.Addr, l.Preferred, l.Valid, l.T1, l.T2, time.Since(start).Round(time.Millisecond))
	if !pool(l.Addr) || l.Valid != 2*time.Minute {
		t.Errorf("leased %s valid %s, want one of the range for 2m", l.Addr, l.Valid)
	}
	// dnsmasq rewrites its lease file after its Reply: each state is
	// waited for.
	line, ok := d.WaitLease6(leaseFileWait, l.Addr, func(x itest.Dnsmasq6Lease) bool {
		return x.IAID == binary.BigEndian.Uint32(r.IAID[:]) && x.DUID == itest.HexColons(r.DUID)
	})
	if !ok {
		t.Fatalf("lease file line %q (%v), want %s with IAID %d and DUID %s", line.Line, line.Line != "", l.Addr, binary.BigEndian.Uint32(r.IAID[:]), itest.HexColons(r.DUID))
	}

	time.Sleep(1100 * time.Millisecond) // so that the expiry moves by whole seconds
	renewed, err := c.Renew(ctx, l, r)
	if err != nil {
		t.Fatal(err)
	}
	after, later := d.WaitLease6(leaseFileWait, l.Addr, func(x itest.Dnsmasq6Lease) bool { return x.Expiry.After(line.Expiry) })
	if renewed.Addr != l.Addr || !later {
		t.Errorf("renewed %s, lease file expiry %s then %s: want %s, later", renewed.Addr, line.Expiry, after.Expiry, l.Addr)
	}
	time.Sleep(1100 * time.Millisecond)
	rebound, err := c.Rebind(ctx, renewed, r)
	if err != nil {
		t.Fatal(err)
	}
	if again, later := d.WaitLease6(leaseFileWait, l.Addr, func(x itest.Dnsmasq6Lease) bool { return x.Expiry.After(after.Expiry) }); rebound.Addr != l.Addr || !later {
		t.Errorf("rebound %s, lease file expiry %s then %s: want %s, later", rebound.Addr, after.Expiry, again.Expiry, l.Addr)
	}

	// ipvlan: the parent's MAC for both, a DUID per endpoint.
	parent := near.MustLink(lan.Parent).Attrs().HardwareAddr
	a := Request{Parent: lan.Parent, MAC: parent, DUID: EndpointDUID("ep-a"), IAID: EndpointIAID("ep-a")}
	b := Request{Parent: lan.Parent, MAC: parent, DUID: EndpointDUID("ep-b"), IAID: EndpointIAID("ep-b")}
	la, err := c.Acquire(ctxFor(t, 15*time.Second), a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := c.Acquire(ctxFor(t, 15*time.Second), b)
	if err != nil {
		t.Fatal(err)
	}
	if la.Addr == lb.Addr || la.Addr == l.Addr || !pool(la.Addr) || !pool(lb.Addr) {
		t.Errorf("ipvlan endpoints got %s and %s (the macvlan one %s): want three addresses of the range", la.Addr, lb.Addr, l.Addr)
	}
	if x, ok := d.WaitLease6(leaseFileWait, lb.Addr, func(x itest.Dnsmasq6Lease) bool { return x.DUID == itest.HexColons(b.DUID) }); !ok {
		t.Errorf("lease file line %q for %s, want DUID %s", x.Line, lb.Addr, itest.HexColons(b.DUID))
	}

	for _, x := range []struct {
		l Lease
		r Request
	}{{rebound, r}, {la, a}, {lb, b}} {
		if err := c.Release(ctx, x.l, x.r); err != nil {
			t.Errorf("Release of %s: %v", x.l.Addr, err)
		}
		if !itest.WaitFor(3*time.Second, func() bool { _, ok := d.Lease6(x.l.Addr); return !ok }) {
			t.Errorf("%s stays in the lease file after its Release", x.l.Addr)
		}
	}
	// dnsmasq answers a Renew of a released lease with NoBinding.
	if _, err := c.Renew(ctxFor(t, 10*time.Second), rebound, r); !errors.Is(err, ErrNoBinding) {
		t.Errorf("Renew of a released lease: %v, want ErrNoBinding", err)
	}
	t.Logf("whole exchange with dnsmasq in %s", time.Since(start).Round(time.Millisecond))
}
