package lan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store/record"
)

const (
	parentMAC = "52:54:00:00:00:01"
	epMAC     = "02:00:00:00:00:0a"
)

var (
	v4 = netip.MustParseAddr("192.0.2.10")
	v6 = netip.MustParseAddr("2001:db8::10")
)

func TestClaims(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	var c Claims
	c.Release("eth0", a, drivertest.EpA) // the zero value is ready
	steps := []struct {
		what     string
		do       func() bool
		want     bool
		isAClaim bool
	}{
		{"A claims a", func() bool { return c.Claim("eth0", a, drivertest.EpA) }, true, true},
		{"A claims a again", func() bool { return c.Claim("eth0", a, drivertest.EpA) }, true, true},
		{"B is refused a", func() bool { return c.Claim("eth0", a, drivertest.EpB) }, false, true},
		{"B claims b", func() bool { return c.Claim("eth0", b, drivertest.EpB) }, true, true},
		{"B claims a on another parent", func() bool { return c.Claim("eth1", a, drivertest.EpB) }, true, true},
		{"B's release of a on eth0 is not A's", func() bool { c.Release("eth0", a, drivertest.EpB); return true }, true, false},
		{"B is still refused a", func() bool { return c.Claim("eth0", a, drivertest.EpB) }, false, true},
		{"A releases a", func() bool { c.Release("eth0", a, drivertest.EpA); return true }, true, false},
		{"B claims a", func() bool { return c.Claim("eth0", a, drivertest.EpB) }, true, true},
		{"A is refused a now", func() bool { return c.Claim("eth0", a, drivertest.EpA) }, false, true},
		{"A is refused b", func() bool { return c.Claim("eth0", b, drivertest.EpA) }, false, true},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("%s: %v, want %v", s.what, got, s.want)
		}
	}
}

func TestClaimsConcurrent(t *testing.T) {
	var c Claims
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Claim("eth0", v4, fmt.Sprint("ep", i)) {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d endpoints claimed one address at once, want 1", won)
	}
}

func fakeKernel(t *testing.T) *nltest.Kernel {
	t.Helper()
	k := nltest.New()
	k.AddLink(kernel.Link{Name: "eth0", Kind: "device", MTU: 1500, MAC: parentMAC})
	k.AddHostLink("eth1", "device", 1500)
	return k
}

func macvlan(opts map[string]string, subnets ...string) record.Network {
	n := drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", subnets...)
	n.Options = opts
	n.Config, _ = config.ConfigFromOptions(opts, n.Type) // as CreateNetwork parses them (an invalid one keeps its default)
	return n
}

func ipvlan(mode string) record.Network {
	return drivertest.Ipvlan(drivertest.NetA, "eth0", mode, "bridge", "192.0.2.0/24")
}

func endpoint(ipv4, ipv6 string) record.Endpoint {
	return record.Endpoint{NetworkID: drivertest.NetA, ID: drivertest.EpA, MAC: epMAC, IPv4: ipv4, IPv6: ipv6}
}

func TestMAC(t *testing.T) {
	k := fakeKernel(t)
	l := &LAN{Links: k, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	if got, err := l.MAC(ctx, macvlan(nil), endpoint("", "")); err != nil || got.String() != epMAC {
		t.Fatalf("macvlan MAC = %v, %v; want the endpoint's %s", got, err, epMAC)
	}
	if got, err := l.MAC(ctx, ipvlan("l2"), endpoint("", "")); err != nil || got.String() != parentMAC {
		t.Fatalf("ipvlan MAC = %v, %v; want the parent's %s", got, err, parentMAC)
	}
	gone := ipvlan("l2")
	gone.Parent = "eth9"
	if _, err := l.MAC(ctx, gone, endpoint("", "")); err == nil {
		t.Fatal("ipvlan MAC of a missing parent: no error")
	}
	bad := endpoint("", "")
	bad.MAC = "not a mac"
	if _, err := l.MAC(ctx, macvlan(nil), bad); err == nil {
		t.Fatal("MAC of an endpoint with a bad MAC: no error")
	}
}

// routes answers a fixed route table.
type routes struct {
	rs  []kernel.Route
	err error
}

func (r routes) Routes(context.Context) ([]kernel.Route, error) { return r.rs, r.err }
func (r routes) RoutesVia(_ context.Context, index int) ([]kernel.Route, error) {
	var out []kernel.Route
	for _, x := range r.rs {
		if x.LinkIndex == index {
			out = append(out, x)
		}
	}
	return out, r.err
}

func TestBudget(t *testing.T) {
	k := fakeKernel(t)
	eth0, _ := k.Link("eth0")
	eth1, _ := k.Link("eth1")
	connected := func(dst string, link int) kernel.Route {
		return kernel.Route{Dst: netip.MustParsePrefix(dst), LinkIndex: link, Table: kernel.MainTable}
	}
	lanRoutes := routes{rs: []kernel.Route{
		connected("192.0.2.0/24", eth0.Index),
		connected("2001:db8::/64", eth0.Index),
		connected("198.51.100.0/24", eth1.Index),
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.0.2.1"), LinkIndex: eth0.Index, Table: kernel.MainTable},
		{Dst: netip.MustParsePrefix("203.0.113.0/24"), Gateway: netip.MustParseAddr("192.0.2.1"), LinkIndex: eth0.Index, Table: kernel.MainTable},
		{Dst: netip.MustParsePrefix("10.9.0.0/16"), LinkIndex: eth0.Index, Table: 100},
	}}
	internal := macvlan(nil, "192.0.2.0/24")
	internal.Internal = true
	gone := macvlan(nil, "192.0.2.0/24")
	gone.Parent = "eth9"
	for _, tc := range []struct {
		name   string
		n      record.Network
		routes RouteLister
		want   time.Duration
	}{
		{"given", macvlan(map[string]string{probeopt.Name: "1s"}, "10.0.0.0/24"), lanRoutes, time.Second},
		{"given off on the host's LAN", macvlan(map[string]string{probeopt.Name: "0"}, "192.0.2.0/24"), lanRoutes, 0},
		{"given off for DHCP", macvlan(map[string]string{probeopt.Name: "0", config.OptDHCP: "true"}), lanRoutes, 0},
		{"given, not valid: the default rule", macvlan(map[string]string{probeopt.Name: "1m"}, "192.0.2.0/24"), lanRoutes, probeopt.Default},
		{"DHCP", macvlan(map[string]string{config.OptDHCP: "true"}), nil, probeopt.Default},
		{"DHCPv6", macvlan(map[string]string{config.OptIPv6Mode: config.IPv6DHCPv6}, "10.0.0.0/24"), nil, probeopt.Default},
		{"the host's LAN (IPv4)", macvlan(nil, "192.0.2.0/24"), lanRoutes, probeopt.Default},
		{"the host's LAN, a part of it", macvlan(nil, "192.0.2.128/25"), lanRoutes, probeopt.Default},
		{"the host's LAN (IPv6)", macvlan(nil, "10.0.0.0/24", "2001:db8::/64"), lanRoutes, probeopt.Default},
		{"another link's LAN", macvlan(nil, "198.51.100.0/24"), lanRoutes, 0},
		{"a subnet behind a gateway", macvlan(nil, "203.0.113.0/24"), lanRoutes, 0},
		{"a route of another table", macvlan(nil, "10.9.1.0/24"), lanRoutes, 0},
		{"no route of it", macvlan(nil, "10.0.0.0/24"), lanRoutes, 0},
		{"no routes to read", macvlan(nil, "192.0.2.0/24"), nil, 0},
		{"routes not read", macvlan(nil, "192.0.2.0/24"), routes{err: errors.New("netlink: dump interrupted")}, 0},
		{"no subnet", macvlan(nil), lanRoutes, 0},
		{"internal", internal, lanRoutes, 0},
		{"parent missing", gone, lanRoutes, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &LAN{Links: k, Routes: tc.routes, Log: slog.New(slog.DiscardHandler)}
			if tc.routes == nil {
				l.Routes = nil
			}
			if got := l.Budget(context.Background(), tc.n); got != tc.want {
				t.Fatalf("Budget = %v, want %v", got, tc.want)
			}
		})
	}
}

// call is one probe or announcement asked for.
type call struct {
	op       string // "probe", "probe6", "announce", "announce6"
	parent   string
	mac      string
	addr     netip.Addr
	budget   time.Duration
	count    int
	interval time.Duration
}

// prober records its calls; answer, when set, answers them (probe and
// announce alike).
type prober struct {
	mu     sync.Mutex
	calls  []call
	answer func(ctx context.Context, c call) error
}

func (p *prober) do(ctx context.Context, c call) error {
	p.mu.Lock()
	p.calls = append(p.calls, c)
	f := p.answer
	p.mu.Unlock()
	if f != nil {
		return f(ctx, c)
	}
	return nil
}

func (p *prober) Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	return p.do(ctx, call{op: "probe", parent: parent, mac: mac.String(), addr: addr, budget: budget})
}

func (p *prober) ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	return p.do(ctx, call{op: "probe6", parent: parent, mac: mac.String(), addr: addr, budget: budget})
}

func (p *prober) Announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	return p.do(ctx, call{op: "announce", parent: parent, mac: mac.String(), addr: addr, count: count, interval: interval})
}

func (p *prober) AnnounceIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	return p.do(ctx, call{op: "announce6", parent: parent, mac: mac.String(), addr: addr, count: count, interval: interval})
}

func (p *prober) got() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.calls)
	slices.SortFunc(out, func(a, b call) int { return a.addr.Compare(b.addr) })
	return out
}

func TestProbe(t *testing.T) {
	conflict := &probe.ConflictError{}
	if !errors.Is(conflict, probe.ErrConflict) {
		t.Fatal("test: probe.ConflictError does not wrap ErrConflict")
	}
	noSocket := errors.New("socket: operation not permitted")
	for _, tc := range []struct {
		name   string
		n      record.Network
		addr   netip.Addr
		budget time.Duration
		answer error
		want   []call
		err    error
	}{
		{name: "IPv4 from the endpoint's MAC", n: macvlan(nil), addr: v4, budget: time.Second,
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}}},
		{name: "IPv6", n: macvlan(nil), addr: v6, budget: time.Second,
			want: []call{{op: "probe6", parent: "eth0", mac: epMAC, addr: v6, budget: time.Second}}},
		{name: "ipvlan from the parent's MAC", n: ipvlan("l2"), addr: v4, budget: probeopt.Default,
			want: []call{{op: "probe", parent: "eth0", mac: parentMAC, addr: v4, budget: probeopt.Default}}},
		{name: "a conflict is returned", n: macvlan(nil), addr: v4, budget: time.Second, answer: conflict, err: probe.ErrConflict,
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}}},
		{name: "another failure takes the address", n: macvlan(nil), addr: v4, budget: time.Second, answer: noSocket,
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}}},
		{name: "budget 0: not probed", n: macvlan(nil), addr: v4},
		{name: "no address: not probed", n: macvlan(nil), budget: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &prober{answer: func(context.Context, call) error { return tc.answer }}
			l := &LAN{Links: fakeKernel(t), Prober: p, Log: slog.New(slog.DiscardHandler)}
			err := l.Probe(context.Background(), tc.n, endpoint("", ""), tc.addr, tc.budget)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Probe = %v, want %v", err, tc.err)
			}
			if got := p.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("probes %+v, want %+v", got, tc.want)
			}
		})
	}
	// No prober: nothing probed, the address taken.
	l := &LAN{Links: fakeKernel(t), Log: slog.New(slog.DiscardHandler)}
	if err := l.Probe(context.Background(), macvlan(nil), endpoint("", ""), v4, time.Second); err != nil {
		t.Fatalf("Probe without a prober = %v", err)
	}
	// No MAC to probe from: taken unprobed.
	p := &prober{}
	l = &LAN{Links: fakeKernel(t), Prober: p, Log: slog.New(slog.DiscardHandler)}
	gone := ipvlan("l2")
	gone.Parent = "eth9"
	if err := l.Probe(context.Background(), gone, endpoint("", ""), v4, time.Second); err != nil || len(p.got()) != 0 {
		t.Fatalf("Probe without a MAC = %v after %d probes, want nil after none", err, len(p.got()))
	}
}

func TestProbeStatic(t *testing.T) {
	on := map[string]string{probeopt.Name: "1s"}
	for _, tc := range []struct {
		name     string
		n        record.Network
		ep       record.Endpoint
		conflict netip.Addr // the address a LAN host answers for
		want     []call
		err      []string
	}{
		{name: "both free", n: macvlan(on), ep: endpoint("192.0.2.10/24", "2001:db8::10/64"),
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}, {op: "probe6", parent: "eth0", mac: epMAC, addr: v6, budget: time.Second}}},
		{name: "IPv4 answered for", n: macvlan(on), ep: endpoint("192.0.2.10/24", "2001:db8::10/64"), conflict: v4,
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}},
			err:  []string{"endpoint eaeaeaeaeaea", "another --ip", "keep 192.0.2.10 out", "address_probe=0"}},
		{name: "IPv6 answered for", n: macvlan(on), ep: endpoint("192.0.2.10/24", "2001:db8::10/64"), conflict: v6,
			want: []call{{op: "probe", parent: "eth0", mac: epMAC, addr: v4, budget: time.Second}, {op: "probe6", parent: "eth0", mac: epMAC, addr: v6, budget: time.Second}},
			err:  []string{"endpoint eaeaeaeaeaea", "keep 2001:db8::10 out"}},
		{name: "probe off", n: macvlan(nil, "10.0.0.0/24"), ep: endpoint("10.0.0.10/24", ""), conflict: netip.MustParseAddr("10.0.0.10")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &prober{answer: func(_ context.Context, c call) error {
				if c.addr == tc.conflict {
					return &probe.ConflictError{}
				}
				return nil
			}}
			l := &LAN{Links: fakeKernel(t), Prober: p, Log: slog.New(slog.DiscardHandler)}
			err := l.ProbeStatic(context.Background(), tc.n, tc.ep)
			if tc.err != nil {
				drivertest.WantErr(t, err, pluginapi.ErrConflict, tc.err...)
				if !errors.Is(err, probe.ErrConflict) {
					t.Fatalf("ProbeStatic = %v, does not wrap the probe's conflict", err)
				}
			} else if err != nil {
				t.Fatalf("ProbeStatic = %v", err)
			}
			if got := p.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("probes %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAnnounce: a joined endpoint's addresses are announced in the
// background from its MAC (the parent's for ipvlan), with the network's
// count and interval.
func TestAnnounce(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    record.Network
		ep   record.Endpoint
		want []call
	}{
		{name: "both families, Docker's defaults", n: macvlan(nil), ep: endpoint("192.0.2.10/24", "2001:db8::10/64"),
			want: []call{{op: "announce", parent: "eth0", mac: epMAC, addr: v4, count: 3, interval: time.Second}, {op: "announce6", parent: "eth0", mac: epMAC, addr: v6, count: 3, interval: time.Second}}},
		{name: "the network's count and interval", n: macvlan(map[string]string{config.OptAdvertiseNMsgs: "2", config.OptAdvertiseMs: "100"}), ep: endpoint("192.0.2.10/24", ""),
			want: []call{{op: "announce", parent: "eth0", mac: epMAC, addr: v4, count: 2, interval: 100 * time.Millisecond}}},
		{name: "ipvlan l2 from the parent's MAC", n: ipvlan("l2"), ep: endpoint("192.0.2.10/24", ""),
			want: []call{{op: "announce", parent: "eth0", mac: parentMAC, addr: v4, count: 3, interval: time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each announcement lasts until its run ends: the first one's
			// start shows the run under way, and Close, which ends it,
			// waits for all of its announcements.
			first := make(chan struct{}, 1)
			p := &prober{answer: func(ctx context.Context, _ call) error {
				select {
				case first <- struct{}{}:
				default:
				}
				<-ctx.Done()
				return ctx.Err()
			}}
			l := &LAN{Links: fakeKernel(t), Announcer: p, Log: slog.New(slog.DiscardHandler)}
			l.Announce(context.Background(), tc.n, tc.ep)
			<-first
			l.Close()
			if got := p.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("announcements %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAnnounceNot: where the engine announces, on internal networks,
// ipvlan l3, with no messages asked, no announcer, no address or no MAC,
// nothing is announced.
func TestAnnounceNot(t *testing.T) {
	engine := macvlan(nil)
	engine.EngineAnnounces = true
	internal := macvlan(nil)
	internal.Internal = true
	gone := ipvlan("l2")
	gone.Parent = "eth9"
	for _, tc := range []struct {
		name        string
		n           record.Network
		ep          record.Endpoint
		noAnnouncer bool
	}{
		{name: "the engine announces", n: engine, ep: endpoint("192.0.2.10/24", "")},
		{name: "internal", n: internal, ep: endpoint("192.0.2.10/24", "")},
		{name: "ipvlan l3", n: ipvlan("l3"), ep: endpoint("192.0.2.10/24", "")},
		{name: "no messages", n: macvlan(map[string]string{config.OptAdvertiseNMsgs: "0"}), ep: endpoint("192.0.2.10/24", "")},
		{name: "no address", n: macvlan(nil), ep: endpoint("", "")},
		{name: "no MAC", n: gone, ep: endpoint("192.0.2.10/24", "")},
		{name: "no announcer", n: macvlan(nil), ep: endpoint("192.0.2.10/24", ""), noAnnouncer: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &prober{}
			l := &LAN{Links: fakeKernel(t), Announcer: p, Log: slog.New(slog.DiscardHandler)}
			if tc.noAnnouncer {
				l.Announcer = nil
			}
			l.Announce(context.Background(), tc.n, tc.ep)
			if runs := l.running.Running(); runs != 0 {
				t.Fatalf("%d announcement runs started", runs)
			}
			l.Close() // waits for any run started
			if got := p.got(); len(got) != 0 {
				t.Fatalf("announced %+v", got)
			}
		})
	}
}

// TestStopAnnouncing: Leave's StopAnnouncing ends a run under way (its
// announcer's context ends) or before its first message (nothing sent);
// other endpoints' runs go on.
func TestStopAnnouncing(t *testing.T) {
	t.Run("before the first message", func(t *testing.T) {
		p := &prober{}
		l := &LAN{Links: fakeKernel(t), Announcer: p, Log: slog.New(slog.DiscardHandler)}
		l.Announce(context.Background(), macvlan(nil), endpoint("192.0.2.10/24", ""))
		l.StopAnnouncing(drivertest.EpA)
		l.Close()
		if got := p.got(); len(got) != 0 {
			t.Fatalf("announced %+v after StopAnnouncing", got)
		}
	})
	t.Run("under way", func(t *testing.T) {
		var mu sync.Mutex
		ctxs := map[netip.Addr]context.Context{}
		started := make(chan struct{}, 2)
		p := &prober{answer: func(ctx context.Context, c call) error {
			mu.Lock()
			ctxs[c.addr] = ctx
			mu.Unlock()
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}}
		l := &LAN{Links: fakeKernel(t), Announcer: p, Log: slog.New(slog.DiscardHandler)}
		a := endpoint("192.0.2.10/24", "")
		b := endpoint("192.0.2.11/24", "")
		b.ID, b.MAC = drivertest.EpB, "02:00:00:00:00:0b"
		l.Announce(context.Background(), macvlan(nil), a)
		l.Announce(context.Background(), macvlan(nil), b)
		<-started
		<-started
		mu.Lock()
		ctxA, ctxB := ctxs[v4], ctxs[netip.MustParseAddr("192.0.2.11")]
		mu.Unlock()
		l.StopAnnouncing(drivertest.EpA)
		if ctxA.Err() == nil {
			t.Fatal("StopAnnouncing(A) left A's announcement going")
		}
		if ctxB.Err() != nil {
			t.Fatal("StopAnnouncing(A) ended B's announcement")
		}
		l.Close()
		if ctxB.Err() == nil {
			t.Fatal("Close left B's announcement going")
		}
	})
}

// TestAnnounceAgain: a second Announce of an endpoint (joined again) ends
// its first run.
func TestAnnounceAgain(t *testing.T) {
	p := &prober{}
	ctxs := make(chan context.Context, 2)
	p.answer = func(ctx context.Context, c call) error {
		ctxs <- ctx
		<-ctx.Done()
		return ctx.Err()
	}
	l := &LAN{Links: fakeKernel(t), Announcer: p, Log: slog.New(slog.DiscardHandler)}
	l.Announce(context.Background(), macvlan(nil), endpoint("192.0.2.10/24", ""))
	first := <-ctxs
	l.Announce(context.Background(), macvlan(nil), endpoint("192.0.2.10/24", ""))
	if first.Err() == nil {
		t.Fatal("the second Announce left the first run going")
	}
	second := <-ctxs
	if second.Err() != nil {
		t.Fatal("the second run was ended too")
	}
	l.Close()
	if second.Err() == nil {
		t.Fatal("Close left the second run going")
	}
}
