package ipam

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store"
)

// fakeProber answers probes: an address in held conflicts with its MAC.
type fakeProber struct {
	mu     sync.Mutex
	held   map[netip.Addr]net.HardwareAddr
	probed []string // "link addr budget"
	fail   error
}

func (p *fakeProber) Probe(_ context.Context, link string, mac net.HardwareAddr, a netip.Addr, budget time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed = append(p.probed, link+" "+a.String()+" "+budget.String())
	if p.fail != nil {
		return p.fail
	}
	if m, ok := p.held[a]; ok {
		return &probe.ConflictError{Addr: a, MAC: m, Parent: link, Seen: "an ARP reply"}
	}
	return nil
}

func (p *fakeProber) ProbeIPv6(ctx context.Context, link string, mac net.HardwareAddr, a netip.Addr, budget time.Duration) error {
	return p.Probe(ctx, link, mac, a, budget)
}

func (p *fakeProber) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.probed...)
}

type memoLog struct {
	mu  sync.Mutex
	got []string
}

func (m *memoLog) Probed(link string, a netip.Addr, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, link+" "+a.String())
}

type lanEvents struct {
	rolledBack
	mu sync.Mutex
	n  int
}

func (e *lanEvents) AddressInUseOnLAN() { e.mu.Lock(); e.n++; e.mu.Unlock() }

var lanMAC = net.HardwareAddr{0x02, 0, 0, 0, 0x0a, 0x01}

// lanEnv: eth0 (MAC 02:..:00:01) holds 198.18.9.2/24 and 2001:db8:9::2/64.
func lanEnv(t *testing.T, p *fakeProber) (*env, *memoLog, *lanEvents) {
	h := newHost().addr(2, "198.18.9.2/24").addr(2, "2001:db8:9::2/64")
	h.links[1].MAC = "02:00:00:00:00:01"
	memo, ev := &memoLog{}, &lanEvents{rolledBack: rolledBack{n: map[string]int{}}}
	e := newEnv(t, h, func(c *Config) { c.Prober, c.ProbeMemo, c.Events = p, memo, ev })
	return e, memo, ev
}

func TestLANLink(t *testing.T) {
	links := []kernel.Link{{Name: "lo", Index: 1, Encap: "loopback", MAC: "00:00:00:00:00:00"},
		{Name: "eth0", Index: 2, MAC: "02:00:00:00:00:01", AltNames: []string{"enp1s0"}}, {Name: "wg0", Index: 3, Encap: "none"}}
	addrs := []kernel.Addr{{Prefix: pfx("127.0.0.1/8"), LinkIndex: 1}, {Prefix: pfx("198.18.9.2/24"), LinkIndex: 2},
		{Prefix: pfx("198.18.10.1/32"), LinkIndex: 2}, {Prefix: pfx("198.18.11.1/24"), LinkIndex: 3}, {Prefix: pfx("fe80::1/64"), LinkIndex: 2}}
	for _, c := range []struct {
		name   string
		rec    store.IPAMPool
		pool   string
		want   string
		wantOK bool
	}{
		{"the parent's", store.IPAMPool{Parent: "eth0"}, "198.18.50.0/24", "eth0", true},
		{"the parent by altname", store.IPAMPool{Parent: "enp1s0"}, "198.18.50.0/24", "eth0", true},
		{"a parent that is gone", store.IPAMPool{Parent: "eth9"}, "198.18.9.0/24", "", false},
		{"a host address in the subnet", store.IPAMPool{}, "198.18.9.0/25", "eth0", true},
		{"a host address around the subnet", store.IPAMPool{}, "198.18.9.128/26", "eth0", true},
		{"a /32 host address is no LAN", store.IPAMPool{}, "198.18.10.0/24", "", false},
		{"a link without Ethernet", store.IPAMPool{}, "198.18.11.0/24", "", false},
		{"the loopback", store.IPAMPool{}, "127.0.0.0/8", "", false},
		{"link-local is not the pool's LAN", store.IPAMPool{}, "fe80::/64", "", false},
		{"no host address", store.IPAMPool{}, "198.18.60.0/24", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ok := lanLink(c.rec, pfx(c.pool), links, addrs)
			if ok != c.wantOK || l.Name != c.want && ok {
				t.Fatalf("lanLink: %q %v, want %q %v", l.Name, ok, c.want, c.wantOK)
			}
		})
	}
}

func TestLANSkipsExpire(t *testing.T) {
	s := &lanSkips{at: map[skipKey]lanSkip{}}
	a := netip.MustParseAddr("198.18.9.3")
	if !s.add("eth0", a, "02:aa", t0.Add(10*time.Minute)) || s.add("eth0", a, "02:aa", t0.Add(10*time.Minute)) {
		t.Fatal("add: new then not new expected")
	}
	for _, c := range []struct {
		at   time.Duration
		link string
		want bool
	}{{0, "eth0", true}, {10*time.Minute - 1, "eth0", true}, {10 * time.Minute, "eth0", false}, {0, "eth1", false}} {
		if got := s.skipped(c.link, a, t0.Add(c.at)); got != c.want {
			t.Errorf("skipped on %s at +%s: %v, want %v", c.link, c.at, got, c.want)
		}
	}
	if gone := s.expire(t0.Add(5 * time.Minute)); len(gone) != 0 {
		t.Errorf("expired at +5m: %v", gone)
	}
	if gone := s.expire(t0.Add(10 * time.Minute)); len(gone) != 1 || gone[skipKey{"eth0", a}].mac != "02:aa" {
		t.Errorf("expired at +10m: %v, want the one skip", gone)
	}
	if len(s.at) != 0 {
		t.Errorf("left after expiry: %v", s.at)
	}
}

func TestParseAddressProbe(t *testing.T) {
	for v, want := range map[string]string{"0": "0s", "300ms": "300ms", "5s": "5s", "1m": "!", "-1s": "!", "x": "!"} {
		got, err := parseAddressProbe(map[string]string{probeopt.Name: v})
		if want == "!" {
			if err == nil || !strings.Contains(err.Error(), v) || !strings.Contains(err.Error(), "address_probe=300ms") {
				t.Errorf("%q: %q %v, want a refusal naming it and an example", v, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", v, got, err, want)
		}
	}
}

// On a LAN pool, addresses that answer are skipped (and counted), the one
// handed out was probed once and told to the memo; past three conflicts
// the request is refused naming them; the skips last lanSkipFor.
func TestRequestAddressSkipsWhatTheLANHolds(t *testing.T) {
	p := &fakeProber{held: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("198.18.9.1"): lanMAC}}
	e, memo, ev := lanEnv(t, p)
	pool := e.pool(t, "", "198.18.9.0/24", "", map[string]string{probeopt.Name: "200ms"}, false)
	if got := e.address(t, pool.ID, "", nil); got.String() != "198.18.9.3/24" {
		t.Fatalf("got %s, want 198.18.9.3 (.1 answered, .2 is the host's)", got)
	}
	if want := []string{"eth0 198.18.9.1 200ms", "eth0 198.18.9.3 200ms"}; strings.Join(p.list(), ",") != strings.Join(want, ",") {
		t.Errorf("probes %v, want %v", p.list(), want)
	}
	if strings.Join(memo.got, ",") != "eth0 198.18.9.3" || ev.n != 1 {
		t.Errorf("memo %v, conflicts counted %d: want the address handed out, one conflict", memo.got, ev.n)
	}
	// The skipped address is not probed again while remembered.
	e.address(t, pool.ID, "", nil)
	if n := len(p.list()); n != 3 {
		t.Errorf("%d probes after a second request, want 3 (.1 not probed again)", n)
	}
	// Three more answer: refused, naming them and their MAC.
	for _, a := range []string{"198.18.9.5", "198.18.9.6", "198.18.9.7"} {
		p.held[netip.MustParseAddr(a)] = lanMAC
	}
	_, err := e.m.RequestAddress(ctx, pool.ID, "", nil)
	if !errors.Is(err, pluginapi.ErrConflict) {
		t.Fatalf("three conflicts: %v, want a conflict", err)
	}
	for _, want := range []string{"198.18.9.5", "198.18.9.6", "198.18.9.7", lanMAC.String(), "--aux-address", "address_probe=0", "eth0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	// The next request goes on past them; after lanSkipFor .1 is probed again.
	if got := e.address(t, pool.ID, "", nil); got.String() != "198.18.9.8/24" {
		t.Errorf("after the refusal: %s, want 198.18.9.8", got)
	}
	delete(p.held, netip.MustParseAddr("198.18.9.1"))
	e.clock.Advance(lanSkipFor)
	if got := e.address(t, pool.ID, "", nil); got.String() != "198.18.9.1/24" {
		t.Errorf("after the skip expired: %s, want 198.18.9.1 again", got)
	}
	// An address asked for (--ip) is probed too: a free one once, and
	// handed out; one a LAN host holds is refused naming it, the MAC and
	// the fixes, and not recorded; one the pool already holds is refused
	// as before, without a probe (an endpoint of ours would answer).
	before := len(p.list())
	e.address(t, pool.ID, "198.18.9.100", nil)
	if got := p.list()[before:]; len(got) != 1 || got[0] != "eth0 198.18.9.100 200ms" {
		t.Errorf("probes of an address asked for: %v, want one of 198.18.9.100 on eth0 (the pool's 200ms)", got)
	}
	held := netip.MustParseAddr("198.18.9.101")
	p.mu.Lock()
	p.held[held] = lanMAC
	p.mu.Unlock()
	_, err = e.m.RequestAddress(ctx, pool.ID, held.String(), nil)
	if !errors.Is(err, pluginapi.ErrConflict) {
		t.Fatalf("RequestAddress of %s a LAN host holds: %v, want a conflict", held, err)
	}
	for _, want := range []string{"198.18.9.101", lanMAC.String(), "another --ip", "--aux-address", "address_probe=0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	delete(p.held, held)
	e.address(t, pool.ID, held.String(), nil) // not recorded by the refusal
	before = len(p.list())
	if _, err := e.m.RequestAddress(ctx, pool.ID, "198.18.9.100", nil); err == nil || len(p.list()) != before {
		t.Errorf("RequestAddress of an address the pool holds: %v, probes %v; want a refusal without a probe", err, p.list()[before:])
	}
}

// No probe where it is off or where no LAN is known; a failed probe hands
// the address out unprobed, and not to the memo.
func TestRequestAddressProbeOffOrFailing(t *testing.T) {
	p := &fakeProber{}
	e, memo, _ := lanEnv(t, p)
	off := e.pool(t, "", "198.18.9.0/25", "", map[string]string{probeopt.Name: "0"}, false)
	other := e.pool(t, "", "198.18.70.0/24", "", nil, false)
	e.address(t, off.ID, "", nil)
	e.address(t, other.ID, "", nil)
	if len(p.list()) != 0 {
		t.Fatalf("probes %v, want none (off; no LAN)", p.list())
	}
	v6 := e.pool(t, "", "2001:db8:9::/64", "", nil, true)
	p.fail = errors.New("no raw socket")
	if got := e.address(t, v6.ID, "", nil); got.String() != "2001:db8:9::1/64" {
		t.Errorf("failed probe: %s, want the address unprobed", got)
	}
	if len(p.list()) != 1 || !strings.HasSuffix(p.list()[0], "300ms") || len(memo.got) != 0 {
		t.Errorf("probes %v (want one with the default 300ms), memo %v (want none)", p.list(), memo.got)
	}
}

func named(n string) map[string]string { return map[string]string{keyEndpointName: n} }

// Sticky addresses by name: a name that comes back gets its address,
// also on a re-created pool of the same subnet; never-used addresses go
// first; remembered ones go to other names last, which forgets them.
func TestStickyAddressesByName(t *testing.T) {
	e := newEnv(t, nil, nil)
	pool := e.pool(t, "", "198.18.30.0/29", "", nil, false) // .1 to .6
	gw := e.address(t, pool.ID, "", map[string]string{keyRequestType: typeGateway})
	web := e.address(t, pool.ID, "", named("web")).Addr()
	db := e.address(t, pool.ID, "", named("db")).Addr()
	if gw.Addr().String() != "198.18.30.1" || web.String() != "198.18.30.2" || db.String() != "198.18.30.3" {
		t.Fatalf("gateway %s, web %s, db %s", gw, web, db)
	}
	release := func(id string, a netip.Addr) {
		t.Helper()
		if err := e.m.ReleaseAddress(ctx, id, a.String()); err != nil {
			t.Fatal(err)
		}
	}
	release(pool.ID, web)
	e.clock.Advance(time.Minute)
	// Other names and unnamed requests get never-used addresses.
	if a := e.address(t, pool.ID, "", named("cache")).Addr(); a.String() != "198.18.30.4" {
		t.Errorf("cache got %s, want the never-used .4 (not web's .2)", a)
	}
	if a := e.address(t, pool.ID, "", nil).Addr(); a.String() != "198.18.30.5" {
		t.Errorf("an unnamed request got %s, want .5", a)
	}
	if a := e.address(t, pool.ID, "", named("web")).Addr(); a != web {
		t.Errorf("web came back to %s, want its %s", a, web)
	}
	// compose down/up: every address released, the pool too; a new pool of
	// the same subnet gives the names their addresses.
	for _, a := range []string{"198.18.30.2", "198.18.30.3", "198.18.30.4", "198.18.30.5", gw.Addr().String()} {
		release(pool.ID, netip.MustParseAddr(a))
	}
	if err := e.m.ReleasePool(ctx, pool.ID); err != nil {
		t.Fatal(err)
	}
	e.reopen(t) // durable
	again := e.pool(t, "", "198.18.30.0/29", "", nil, false)
	if again.ID == pool.ID {
		t.Fatal("the re-created pool has the old ID")
	}
	e.address(t, again.ID, "", map[string]string{keyRequestType: typeGateway})
	for name, want := range map[string]string{"db": "198.18.30.3", "web": "198.18.30.2", "cache": "198.18.30.4"} {
		if a := e.address(t, again.ID, "", named(name)).Addr(); a.String() != want {
			t.Errorf("%s on the re-created pool got %s, want %s", name, a, want)
		}
	}
	names, err := e.m.Names(ctx)
	if err != nil || len(names) != 3 || !names[0].Held {
		t.Fatalf("names %+v, %v: want cache, db, web held", names, err)
	}
	// Full but for remembered addresses: the least recently used goes to a
	// new name, and its old name is forgotten.
	e.address(t, again.ID, "", nil)                       // .5, never-used
	e.address(t, again.ID, "", nil)                       // .6
	release(again.ID, netip.MustParseAddr("198.18.30.3")) // db first
	e.clock.Advance(time.Minute)
	release(again.ID, netip.MustParseAddr("198.18.30.2")) // then web
	if a := e.address(t, again.ID, "", named("new")).Addr(); a.String() != "198.18.30.3" {
		t.Errorf("new got %s, want db's .3 (released first)", a)
	}
	if a := e.address(t, again.ID, "", named("db")).Addr(); a.String() != "198.18.30.2" {
		t.Errorf("db, forgotten, got %s, want the last one left, web's .2", a)
	}
	// Forgotten after the TTL: listed no more, and a never-used address again.
	release(again.ID, netip.MustParseAddr("198.18.30.4"))
	e.clock.Advance(nameTTL)
	names, _ = e.m.Names(ctx)
	for _, n := range names {
		if n.Name == "cache" {
			t.Errorf("cache is listed %s after its release", nameTTL)
		}
	}
}

// A pool whose only free addresses are skipped says so.
func TestRequestAddressFullButForSkips(t *testing.T) {
	p := &fakeProber{held: map[netip.Addr]net.HardwareAddr{}}
	for _, a := range []string{"198.18.9.1", "198.18.9.3"} {
		p.held[netip.MustParseAddr(a)] = lanMAC
	}
	e, _, _ := lanEnv(t, p)
	pool := e.pool(t, "", "198.18.9.0/29", "", nil, false) // .1-.6; .2 is the host's
	for _, want := range []string{"198.18.9.4/29", "198.18.9.5/29", "198.18.9.6/29"} {
		if got := e.address(t, pool.ID, "", nil); got.String() != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	_, err := e.m.RequestAddress(ctx, pool.ID, "", nil)
	if !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), "2 of its addresses are skipped as in use on the LAN of eth0") || !strings.Contains(err.Error(), "198.18.9.1 ("+lanMAC.String()+"), 198.18.9.3 ("+lanMAC.String()+")") {
		t.Fatalf("full but for skips: %v", err)
	}
	// Within one request: the refusal names what it probed.
	e2, _, _ := lanEnv(t, &fakeProber{held: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("198.18.9.1"): lanMAC}})
	small := e2.pool(t, "", "198.18.9.0/30", "", nil, false) // .1 and .2 (the host's)
	_, err = e2.m.RequestAddress(ctx, small.ID, "", nil)
	if !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), "no free address is left but the 1 it probed") || !strings.Contains(err.Error(), "198.18.9.1 by MAC "+lanMAC.String()) {
		t.Fatalf("full after a conflict: %v", err)
	}
}
