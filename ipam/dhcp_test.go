package ipam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// fakeDHCP is a LAN's DHCP server as the IPAM's client sees it: like
// dnsmasq, the same client (MAC) gets the same address; offers listed in
// next come first (one each).
type fakeDHCP struct {
	mu       sync.Mutex
	byMAC    map[string]netip.Addr
	nextAddr netip.Addr
	next     []netip.Addr
	asked    []dhcp.Request
	released []string // "mac addr"
	declined []string
}

func newFakeDHCP() *fakeDHCP {
	return &fakeDHCP{byMAC: map[string]netip.Addr{}, nextAddr: netip.MustParseAddr("198.18.180.100")}
}

func (f *fakeDHCP) Acquire(_ context.Context, r dhcp.Request) (dhcp.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, r)
	a, ok := f.byMAC[r.MAC.String()]
	switch {
	case len(f.next) > 0:
		a, f.next = f.next[0], f.next[1:]
	case !ok:
		a = f.nextAddr
		f.nextAddr = f.nextAddr.Next()
	}
	if r.Only.IsValid() && r.Only != a {
		return dhcp.Lease{}, fmt.Errorf("%w: offered %s", dhcp.ErrNotOffered, a)
	}
	f.byMAC[r.MAC.String()] = a
	return dhcp.Lease{Addr: netip.PrefixFrom(a, 24), ServerID: netip.MustParseAddr("198.18.180.1"), Router: netip.MustParseAddr("198.18.180.1"),
		LeaseTime: 2 * time.Minute, T1: time.Minute, T2: 105 * time.Second, Acquired: t0}, nil
}

func (f *fakeDHCP) Release(_ context.Context, l dhcp.Lease, r dhcp.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, r.MAC.String()+" "+l.Addr.Addr().String())
	return nil
}

func (f *fakeDHCP) Decline(_ context.Context, l dhcp.Lease, r dhcp.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.declined = append(f.declined, r.MAC.String()+" "+l.Addr.Addr().String())
	delete(f.byMAC, r.MAC.String())
	return nil
}

func (f *fakeDHCP) last() dhcp.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[len(f.asked)-1]
}

// dhcpEnv is an IPAM over a host whose eth0 (permanent address
// 52:54:00:00:00:99) and eth1 are on LANs with DHCP servers.
func dhcpEnv(t *testing.T) (*env, *fakeDHCP) {
	h := newHost().addr(2, "198.18.180.2/24")
	h.links[1].MAC, h.links[1].PermMAC = "52:54:00:00:00:02", "52:54:00:00:00:99"
	h.links[2].MAC = "52:54:00:00:00:03"
	srv := newFakeDHCP()
	return newEnv(t, h, func(c *Config) { c.DHCP = srv }), srv
}

var lanDHCP = map[string]string{OptParent: "eth0", OptDHCP: "true"}

func leaseOf(t *testing.T, e *env, poolID string, a netip.Prefix) store.IPAMLease {
	t.Helper()
	var l store.IPAMLease
	var ok bool
	if err := e.db.View(func(tx *store.Tx) (err error) { l, ok, err = tx.IPAMLease(poolID, a.Addr().String()); return err }); err != nil || !ok {
		t.Fatalf("no lease recorded for %s in pool %s: %v", a, poolID, err)
	}
	return l
}

// dhcpPool is a DHCP pool as `docker network create -d underlay` makes
// one: the pool, then the driver's network record on it (CreateNetwork).
func (e *env) dhcpPool(t *testing.T, pool string, opts map[string]string, v6 bool) store.IPAMPool {
	t.Helper()
	p := e.pool(t, "", pool, "", opts, v6)
	n := record.Network{ID: "net-" + p.ID, Parent: p.Parent, Type: "macvlan"}
	if v6 {
		n.IPv6, n.Config.DHCP.FromIPAM6 = []record.Pool{{Subnet: p.Prefix}}, p.DHCP
	} else {
		n.IPv4, n.Config.DHCP.FromIPAM = []record.Pool{{Subnet: p.Prefix}}, p.DHCP
	}
	if err := e.db.Batch(func(tx *store.Tx) error { return tx.PutNetwork(n) }); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDHCPPoolOptions(t *testing.T) {
	e, _ := dhcpEnv(t)
	for _, tc := range []struct {
		opts  map[string]string
		words []string
	}{
		{map[string]string{OptDHCP: "true"}, []string{"dhcp=true needs --ipam-opt parent="}},
		{map[string]string{OptParent: "eth0", OptDHCP: "yes please"}, []string{"dhcp=yes please", "true or false"}},
		{map[string]string{OptParent: "eth0", OptDHCPHostname: "false"}, []string{"dhcp_hostname=false applies to --ipam-opt dhcp=true"}},
		{map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPHostname: "no"}, []string{"dhcp_hostname=no", "true or false"}},
		{map[string]string{OptParent: "eth0", OptDHCPFQDN: "true"}, []string{"dhcp_fqdn=true applies to --ipam-opt dhcp=true"}},
	} {
		_, err := e.m.RequestPool(ctx, "", "198.18.180.0/24", "", tc.opts, false)
		wantErr(t, err, pluginapi.ErrInvalid, tc.words...)
	}
	// Without a DHCP client, a DHCP pool is refused.
	h := newHost()
	none := newEnv(t, h, nil)
	_, err := none.m.RequestPool(ctx, "", "198.18.180.0/24", "", lanDHCP, false)
	wantErr(t, err, pluginapi.ErrInvalid, "without a DHCP client")
	// The IPv6 request of a dual-stack network reads neither.
	e.pool(t, "", "2001:db8:180::/64", "", map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPHostname: "false"}, true)
	if p := e.dhcpPool(t, "198.18.180.0/24", map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPHostname: "false"}, false); !p.DHCP || !p.NoHostname {
		t.Errorf("pool %+v: want dhcp and no host name", p)
	}
}

// A name's lease: its MAC (NameMAC over the parent's permanent address),
// a client ID of it, the name as host name; the same again after a
// release (the address asked for again); no name: a random MAC.
func TestDHCPLeaseFollowsTheName(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	if gw := e.address(t, p.ID, "198.18.180.1", gwOpts); gw.Addr().String() != "198.18.180.1" {
		t.Fatalf("gateway %s", gw)
	}
	if len(srv.asked) != 0 {
		t.Fatal("the gateway was leased")
	}
	base, _ := net.ParseMAC("52:54:00:00:00:99")
	want := lanmac.NameMAC(base, 0, "web")
	a := e.address(t, p.ID, "", named("web"))
	r := srv.last()
	if r.MAC.String() != want.String() || r.Hostname != "web" || !bytes.Equal(r.ClientID, append([]byte{1}, want...)) || r.Parent != "eth0" {
		t.Fatalf("request %+v: want MAC %s, host name web, client ID 01+MAC on eth0", r, want)
	}
	if l := leaseOf(t, e, p.ID, a); l.MAC != want.String() || l.Name != "web" || l.Hostname != "web" || l.Lease.Addr != a.String() {
		t.Fatalf("recorded lease %+v", l)
	}
	if err := e.m.ReleaseAddress(ctx, p.ID, a.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if len(srv.released) != 1 || srv.released[0] != want.String()+" "+a.Addr().String() {
		t.Fatalf("released %v: a lease no endpoint took is given back", srv.released)
	}
	b := e.address(t, p.ID, "", named("/web"))
	if r := srv.last(); b != a || r.MAC.String() != want.String() || r.Address != a.Addr() {
		t.Fatalf("again: %s with request %+v; want %s asked for again with MAC %s", b, r, a, want)
	}
	// Without a name: random MACs, each its own.
	x := e.address(t, p.ID, "", nil)
	mx := srv.last().MAC.String()
	y := e.address(t, p.ID, "", nil)
	if my := srv.last().MAC.String(); mx == my || x == y || srv.last().Hostname != "" {
		t.Fatalf("no name: %s %s and %s %s", x, mx, y, my)
	}
	// dhcp_fqdn=true: option 81 too.
	f := e.dhcpPool(t, "198.18.184.0/24", map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPFQDN: "true"}, false)
	if !f.FQDN {
		t.Fatalf("pool %+v: want dhcp_fqdn recorded", f)
	}
	srv.nextAddr = netip.MustParseAddr("198.18.184.50")
	e.address(t, f.ID, "", named("cam"))
	if r := srv.last(); !r.FQDN || r.Hostname != "cam" {
		t.Fatalf("dhcp_fqdn=true sent %+v", r)
	}
	// dhcp_hostname=false: no host name.
	q := e.dhcpPool(t, "198.18.181.0/24", map[string]string{OptParent: "eth1", OptDHCP: "true", OptDHCPHostname: "false"}, false)
	srv.nextAddr = netip.MustParseAddr("198.18.181.50")
	e.address(t, q.ID, "", named("db"))
	if r := srv.last(); r.Hostname != "" || r.Parent != "eth1" {
		t.Fatalf("dhcp_hostname=false sent %+v", r)
	}
}

// --ip is asked of the server; another address refuses, naming both; an
// offer the host holds is declined and the next one taken; one outside
// the pool is refused and given back.
func TestDHCPLeaseRefusals(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	srv.nextAddr = netip.MustParseAddr("198.18.180.120")
	_, err := e.m.RequestAddress(ctx, p.ID, "198.18.180.77", named("fixed"))
	wantErr(t, err, pluginapi.ErrConflict, "198.18.180.77", "198.18.180.120", "--ip")
	if r := srv.last(); r.Only != netip.MustParseAddr("198.18.180.77") {
		t.Fatalf("--ip not asked for: %+v", r)
	}
	srv.next = []netip.Addr{netip.MustParseAddr("198.18.180.2")} // the host's own
	a := e.address(t, p.ID, "", named("web"))
	if a.Addr().String() == "198.18.180.2" || len(srv.declined) != 1 {
		t.Fatalf("got %s, declined %v: the host's address must be declined", a, srv.declined)
	}
	srv.next = []netip.Addr{netip.MustParseAddr("198.18.9.9")}
	_, err = e.m.RequestAddress(ctx, p.ID, "", named("stray"))
	wantErr(t, err, pluginapi.ErrInvalid, "198.18.9.9", "outside the pool", "--subnet")
	if n := len(srv.released); n != 1 {
		t.Fatalf("released %v: the lease outside the pool must be given back", srv.released)
	}
	// The same name on another DHCP pool of the same parent: refused,
	// naming the first; on another parent it is another MAC.
	q := e.dhcpPool(t, "198.18.182.0/24", map[string]string{OptParent: "eth0", OptDHCP: "true"}, false)
	_, err = e.m.RequestAddress(ctx, q.ID, "", named("web"))
	wantErr(t, err, pluginapi.ErrConflict, `"web"`, "eth0", a.Addr().String(), p.ID)
	o := e.dhcpPool(t, "198.18.183.0/24", map[string]string{OptParent: "eth1", OptDHCP: "true"}, false)
	srv.nextAddr = netip.MustParseAddr("198.18.183.10")
	e.address(t, o.ID, "", named("web"))
	if m := srv.last().MAC.String(); m == leaseOf(t, e, p.ID, a).MAC {
		t.Fatalf("one name on two parents got one MAC %s", m)
	}
	// A lease an endpoint took over is the driver's to release.
	if err := e.db.Batch(func(tx *store.Tx) error {
		l := leaseOf(t, e, p.ID, a)
		l.EndpointID, l.NetworkID = "ep1", "net1"
		return tx.PutIPAMLease(p.ID, a.Addr().String(), l)
	}); err != nil {
		t.Fatal(err)
	}
	before := len(srv.released)
	if err := e.m.ReleaseAddress(ctx, p.ID, a.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if len(srv.released) != before {
		t.Fatalf("released %v: the IPAM released a lease the driver holds", srv.released)
	}
}

func TestLocalSpace(t *testing.T) {
	if itest.LocalSpace != LocalSpace {
		t.Fatalf("itest.LocalSpace %q, want %q", itest.LocalSpace, LocalSpace)
	}
}

// fakeDHCP6 is a LAN's DHCPv6 server: the same DUID gets the same
// address; a hint is given when no one has it.
type fakeDHCP6 struct {
	mu       sync.Mutex
	byDUID   map[string]netip.Addr
	next     netip.Addr
	asked    []dhcp6.Request
	released []string // "duid addr"
}

func (f *fakeDHCP6) Acquire(_ context.Context, r dhcp6.Request) (dhcp6.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, r)
	a, ok := f.byDUID[string(r.DUID)]
	if !ok {
		a = f.next
		f.next = f.next.Next()
	}
	f.byDUID[string(r.DUID)] = a
	return dhcp6.Lease{Addr: a, ServerID: []byte{0, 3, 0, 1, 2, 0, 0, 0, 0, 1}, IAID: r.IAID, T1: time.Minute, T2: 2 * time.Minute, Preferred: 3 * time.Minute, Valid: 4 * time.Minute, Acquired: t0}, nil
}

func (f *fakeDHCP6) Release(_ context.Context, l dhcp6.Lease, r dhcp6.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, fmt.Sprintf("%x %s", r.DUID, l.Addr))
	return nil
}

func (f *fakeDHCP6) Decline(context.Context, dhcp6.Lease, dhcp6.Request) error { return nil }

// DHCPv6 pools: the same name's MAC as on the IPv4 pool, its DUID-LL and
// an IAID of it, the name in option 39; --ip6 another than the server's
// refused naming both, that lease given back; a lease no endpoint took
// released with its DUID at ReleaseAddress.
func TestDHCPv6LeaseFollowsTheName(t *testing.T) {
	h := newHost().addr(2, "198.18.180.2/24")
	h.links[1].MAC, h.links[1].PermMAC = "52:54:00:00:00:02", "52:54:00:00:00:99"
	srv, srv6 := newFakeDHCP(), &fakeDHCP6{byDUID: map[string]netip.Addr{}, next: netip.MustParseAddr("2001:db8:180::100")}
	e := newEnv(t, h, func(c *Config) { c.DHCP, c.DHCP6 = srv, srv6 })
	opts := map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPv6: "true"}
	p4 := e.dhcpPool(t, "198.18.180.0/24", opts, false)
	p6 := e.dhcpPool(t, "2001:db8:180::/64", opts, true)
	if !p4.DHCP || !p6.DHCP {
		t.Fatalf("pools %+v and %+v: want both DHCP pools", p4, p6)
	}
	e.address(t, p6.ID, "2001:db8:180::1", gwOpts)
	if len(srv6.asked) != 0 {
		t.Fatal("the IPv6 gateway was leased")
	}
	a4 := e.address(t, p4.ID, "", named("web"))
	a6 := e.address(t, p6.ID, "", named("web"))
	mac := srv.last().MAC
	r := srv6.asked[len(srv6.asked)-1]
	if !bytes.Equal(r.DUID, dhcp6.DUIDFromMAC(mac)) || r.MAC.String() != mac.String() || r.IAID != [4]byte(mac[2:]) || r.Hostname != "web" || r.Parent != "eth0" {
		t.Fatalf("DHCPv6 request %+v: want the IPv4 lease's MAC %s, its DUID-LL, an IAID of its last 4 bytes, host name web", r, mac)
	}
	if a6.Bits() != 64 || a6.Addr() != netip.MustParseAddr("2001:db8:180::100") {
		t.Fatalf("IPv6 address %s", a6)
	}
	l := leaseOf(t, e, p6.ID, a6)
	if l.Lease6 == nil || l.Lease != nil || l.MAC != mac.String() || l.Lease6.Hostname != "web" || l.Lease6.Addr != a6.Addr().String() {
		t.Fatalf("recorded IPv6 lease %+v (%+v)", l, l.Lease6)
	}
	if l4 := leaseOf(t, e, p4.ID, a4); l4.Lease == nil || l4.Lease6 != nil {
		t.Fatalf("recorded IPv4 lease %+v", l4)
	}
	// Back again after a release: the address asked for as the hint.
	if err := e.m.ReleaseAddress(ctx, p6.ID, a6.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x %s", dhcp6.DUIDFromMAC(mac), a6.Addr()); len(srv6.released) != 1 || srv6.released[0] != want {
		t.Fatalf("released %v, want [%s]", srv6.released, want)
	}
	if b := e.address(t, p6.ID, "", named("web")); b != a6 || srv6.asked[len(srv6.asked)-1].Hint != a6.Addr() {
		t.Fatalf("again: %s, hint %s; want %s asked for again", b, srv6.asked[len(srv6.asked)-1].Hint, a6)
	}
	// --ip6 the server does not give: refused naming both, given back.
	_, err := e.m.RequestAddress(ctx, p6.ID, "2001:db8:180::77", named("db"))
	wantErr(t, err, pluginapi.ErrConflict, "2001:db8:180::77", "2001:db8:180::101", "--ip")
	if r := srv6.asked[len(srv6.asked)-1]; r.Hint != netip.MustParseAddr("2001:db8:180::77") {
		t.Fatalf("--ip6 not the hint: %+v", r)
	}
	if n := len(srv6.released); n != 2 {
		t.Fatalf("released %v: the lease of another address than --ip6 must be given back", srv6.released)
	}
}

// A name whose MAC a live endpoint holds (a container renamed while it
// runs) is refused, naming that endpoint; once its endpoint is gone, or
// when no endpoint took it within a minute, a lease record counts for
// nothing, and the driver's journaled release of the address is dropped
// when the address is leased again.
func TestDHCPNameHeldByALiveEndpoint(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	a := e.address(t, p.ID, "", named("web"))
	take := func(netID, epID string) {
		t.Helper()
		if err := e.db.Batch(func(tx *store.Tx) error {
			if err := tx.PutNetwork(record.Network{ID: netID, Parent: "eth0", Type: "macvlan"}); err != nil {
				return err
			}
			if err := tx.PutEndpoint(record.Endpoint{NetworkID: netID, ID: epID, IPv4: a.String(), Link: "ul" + epID}); err != nil {
				return err
			}
			l := leaseOf(t, e, p.ID, a)
			l.NetworkID, l.EndpointID = netID, epID
			return tx.PutIPAMLease(p.ID, a.Addr().String(), l)
		}); err != nil {
			t.Fatal(err)
		}
	}
	take("net1", "ep1")
	// docker rename web web-old; docker run --name web: refused.
	asked := len(srv.asked)
	_, err := e.m.RequestAddress(ctx, p.ID, "", named("web"))
	wantErr(t, err, pluginapi.ErrConflict, `"web"`, "ep1", "net1", a.Addr().String(), "another name")
	if len(srv.asked) != asked || len(srv.declined) != 0 {
		t.Fatalf("asked the server %d times, declined %v: the running container's lease must be left alone", len(srv.asked)-asked, srv.declined)
	}
	if l := leaseOf(t, e, p.ID, a); l.EndpointID != "ep1" {
		t.Fatalf("the running container's lease record %+v was changed", l)
	}
	// Its endpoint gone (deleted while the daemon was down, say), with a
	// release journaled: the name leases again, the record and the
	// journal entry go.
	if err := e.db.Batch(func(tx *store.Tx) error {
		for _, pr := range []record.PendingRelease{
			{NetworkID: "net1", EndpointID: "ep1", Parent: "eth0", Lease: record.Lease{Addr: a.String()}},
			{NetworkID: "net1", EndpointID: "ep9", Parent: "eth0", Lease: record.Lease{Addr: "198.18.180.99/24"}}, // another address: stays
			{NetworkID: "net2", EndpointID: "ep8", Parent: "eth1", Lease: record.Lease{Addr: a.String()}},         // another parent: stays
		} {
			if err := tx.PutPendingRelease(pr); err != nil {
				return err
			}
		}
		return tx.DeleteEndpoint("net1", "ep1")
	}); err != nil {
		t.Fatal(err)
	}
	if b := e.address(t, p.ID, "", named("web")); b != a {
		t.Fatalf("web got %s, want %s again", b, a)
	}
	var pending []record.PendingRelease
	if err := e.db.View(func(tx *store.Tx) (err error) { pending, err = tx.PendingReleases(); return err }); err != nil || len(pending) != 2 {
		t.Fatalf("journaled releases %v (%v): the one of the address leased again must go, the two others stay", pending, err)
	}
	for _, pr := range pending {
		if pr.EndpointID == "ep1" {
			t.Fatalf("the journaled release of %s on eth0 is still there: %+v", a, pr)
		}
	}
	// Leased but never taken over, over a minute ago: stale.
	q := e.dhcpPool(t, "198.18.181.0/24", lanDHCP, false)
	srv.nextAddr = netip.MustParseAddr("198.18.181.10")
	if _, err := e.m.RequestAddress(ctx, q.ID, "", named("web")); !errors.Is(err, pluginapi.ErrConflict) {
		t.Fatalf("web on a second DHCP pool of eth0 while its lease is fresh: %v, want a conflict", err)
	}
	e.clock.Advance(2 * time.Minute)
	srv.mu.Lock()
	delete(srv.byMAC, leaseOf(t, e, p.ID, a).MAC)
	srv.mu.Unlock()
	e.address(t, q.ID, "", named("web"))
}

// Before the driver's CreateNetwork, a DHCP pool hands out --aux-address
// reservations as any pool; a pool no underlay network uses (-d macvlan
// with underlay's IPAM) leases nothing, and says why.
func TestDHCPPoolWithoutTheDriver(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.pool(t, "", "198.18.180.0/24", "", lanDHCP, false)
	if a := e.address(t, p.ID, "198.18.180.9", nil); a.Addr().String() != "198.18.180.9" || len(srv.asked) != 0 {
		t.Fatalf("aux address %s, DHCP asked %d times: want it reserved without a lease", a, len(srv.asked))
	}
	_, err := e.m.RequestAddress(ctx, p.ID, "", named("web"))
	wantErr(t, err, pluginapi.ErrInvalid, p.ID, "-d underlay", "dhcp=true")
	if len(srv.asked) != 0 {
		t.Fatal("leased for a network the driver does not renew")
	}
}

// A leased address is probed on the LAN from the name's MAC: one a LAN
// host answers for is declined and the next lease taken; the one probed
// clean is told to the memo (the driver's CreateEndpoint skips its probe).
func TestDHCPLeaseProbed(t *testing.T) {
	h := newHost().addr(2, "198.18.180.2/24")
	h.links[1].MAC = "52:54:00:00:00:02"
	srv := newFakeDHCP()
	pr := &fakeProber{held: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("198.18.180.100"): {2, 9, 9, 9, 9, 9}}}
	memo := &memoLog{}
	ev := &lanEvents{}
	e := newEnv(t, h, func(c *Config) { c.DHCP, c.Prober, c.ProbeMemo, c.Events = srv, pr, memo, ev })
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	a := e.address(t, p.ID, "", named("web"))
	if a.Addr().String() != "198.18.180.101" || len(srv.declined) != 1 || !strings.HasSuffix(srv.declined[0], " 198.18.180.100") {
		t.Fatalf("got %s, declined %v: want .100 (held on the LAN) declined and .101 taken", a, srv.declined)
	}
	if got := pr.list(); len(got) != 2 || got[0] != "eth0 198.18.180.100 300ms" {
		t.Fatalf("probes %v: want each lease probed with the default budget", got)
	}
	if fmt.Sprint(memo.got) != "[eth0 198.18.180.101]" || ev.n != 1 {
		t.Fatalf("memo %v, conflicts counted %d", memo.got, ev.n)
	}
}

// ReleasePool gives back the leases no endpoint took; --ip-range is
// refused on a DHCP pool (the server picks).
func TestDHCPPoolRelease(t *testing.T) {
	e, srv := dhcpEnv(t)
	_, err := e.m.RequestPool(ctx, "", "198.18.180.0/24", "198.18.180.128/25", lanDHCP, false)
	wantErr(t, err, pluginapi.ErrInvalid, "--ip-range 198.18.180.128/25", "the server")
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	a := e.address(t, p.ID, "", named("web"))
	if err := e.m.ReleasePool(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if len(srv.released) != 1 || !strings.HasSuffix(srv.released[0], " "+a.Addr().String()) {
		t.Fatalf("released %v, want %s's lease", srv.released, a)
	}
}

// A lease whose answer was lost (no CreateEndpoint, no ReleaseAddress)
// is the same name's when Docker asks again: the server gives it back and
// it is taken, not declined; a stale record of another name at the
// offered address (its lease long gone) does not make it declined either.
func TestDHCPLeaseOverStaleRecords(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.dhcpPool(t, "198.18.180.0/24", lanDHCP, false)
	a := e.address(t, p.ID, "", named("web"))
	if b := e.address(t, p.ID, "", named("web")); b != a || len(srv.declined) != 0 {
		t.Fatalf("asked again: %s, declined %v; want %s taken again", b, srv.declined, a)
	}
	old := e.address(t, p.ID, "", named("old"))
	e.clock.Advance(2 * time.Minute) // never taken over: stale
	srv.next = []netip.Addr{old.Addr()}
	if c := e.address(t, p.ID, "", named("new")); c != old || len(srv.declined) != 0 {
		t.Fatalf("new got %s, declined %v; want %s (old's stale record) taken", c, srv.declined, old)
	}
	if l := leaseOf(t, e, p.ID, old); l.Name != "new" {
		t.Fatalf("the record at %s is %+v, want new's", old, l)
	}
}
