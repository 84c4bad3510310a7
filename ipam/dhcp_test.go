package ipam

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
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
	if p := e.pool(t, "", "198.18.180.0/24", "", map[string]string{OptParent: "eth0", OptDHCP: "true", OptDHCPHostname: "false"}, false); !p.DHCP || !p.NoHostname {
		t.Errorf("pool %+v: want dhcp and no host name", p)
	}
}

// A name's lease: its MAC (NameMAC over the parent's permanent address),
// a client ID of it, the name as host name; the same again after a
// release (the address asked for again); no name: a random MAC.
func TestDHCPLeaseFollowsTheName(t *testing.T) {
	e, srv := dhcpEnv(t)
	p := e.pool(t, "", "198.18.180.0/24", "", lanDHCP, false)
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
	// dhcp_hostname=false: no host name.
	q := e.pool(t, "", "198.18.181.0/24", "", map[string]string{OptParent: "eth1", OptDHCP: "true", OptDHCPHostname: "false"}, false)
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
	p := e.pool(t, "", "198.18.180.0/24", "", lanDHCP, false)
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
	q := e.pool(t, "", "198.18.182.0/24", "", map[string]string{OptParent: "eth0", OptDHCP: "true"}, false)
	_, err = e.m.RequestAddress(ctx, q.ID, "", named("web"))
	wantErr(t, err, pluginapi.ErrConflict, `"web"`, "eth0", a.Addr().String(), p.ID)
	o := e.pool(t, "", "198.18.183.0/24", "", map[string]string{OptParent: "eth1", OptDHCP: "true"}, false)
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
