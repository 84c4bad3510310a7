package driver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/metrics"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// lanRunner is a background LAN preflight that records its calls and
// answers items (nil: none); with hold set, each run waits until its
// context ends.
type lanRunner struct {
	mu    sync.Mutex
	calls []lancheck.Network
	ctxs  []context.Context
	items func(n lancheck.Network) []lancheck.Item
	hold  bool
	// ended counts the held runs that saw their context end.
	ended atomic.Int32
}

func (r *lanRunner) run(ctx context.Context, n lancheck.Network) []lancheck.Item {
	r.mu.Lock()
	r.calls = append(r.calls, n)
	r.ctxs = append(r.ctxs, ctx)
	items, hold := r.items, r.hold
	r.mu.Unlock()
	if hold {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a check cleaning up after itself
		r.ended.Add(1)
	}
	if items == nil {
		return nil
	}
	return items(n)
}

func (r *lanRunner) called() []lancheck.Network {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lancheck.Network(nil), r.calls...)
}

// withLANCheck opens the driver again with r as its preflight and a
// logger writing to the returned buffer.
func (f *fixture) withLANCheck(r *lanRunner) *syncBuffer {
	f.t.Helper()
	f.close()
	var buf syncBuffer
	f.lanCheck = r.run
	f.logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f.open()
	return &buf
}

// syncBuffer is a log buffer the driver's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// Macvlan on a wireless parent is refused at the create with both fixes,
// naming the parent (also through a VLAN on it, before the VLAN is made);
// allow_wireless=true and type=ipvlan are created. The refusal costs no
// lookup the resolution did not make.
func TestCreateRefusesMacvlanOnWirelessParent(t *testing.T) {
	f := newFixture(t)
	f.k.AddHostLink("wlan0", "device", 1500)
	f.k.SetWireless("wlan0")

	err := f.create(netReq{ID: netA, Opts: map[string]string{"parent": "wlan0"}})
	wantErr(t, err, pluginapi.ErrInvalid, "parent wlan0 is a wireless", "-o type=ipvlan -o ipvlan_mode=l2", "-o allow_wireless=true")
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "wlan0", "type": "macvlan", "macvlan_mode": "passthru"}})
	wantErr(t, err, pluginapi.ErrInvalid, "wlan0", "type=ipvlan", "allow_wireless=true")
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "wlan0.10"}})
	wantErr(t, err, pluginapi.ErrInvalid, "parent wlan0.10 is a VLAN on wlan0", "wireless", "type=ipvlan", "allow_wireless=true")
	f.wantNetworks()
	f.wantLinks("wlan0") // no VLAN made for the refused network
	// A user's VLAN on it: its base is looked up.
	wlan, err := f.k.Get(context.Background(), "wlan0")
	if err != nil {
		t.Fatal(err)
	}
	f.k.AddLink(kernel.Link{Name: "wl20", Kind: kernel.KindVLAN, ParentIndex: wlan.Index, VLAN: 20, MTU: 1500})
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "wl20"}})
	wantErr(t, err, pluginapi.ErrInvalid, "parent wl20 is a VLAN on wlan0", "type=ipvlan", "allow_wireless=true")
	// A VLAN on that VLAN: the link at the bottom counts.
	wl20, err := f.k.Get(context.Background(), "wl20")
	if err != nil {
		t.Fatal(err)
	}
	f.k.AddLink(kernel.Link{Name: "wl20.7", Kind: kernel.KindVLAN, ParentIndex: wl20.Index, VLAN: 7, MTU: 1500})
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "wl20.7"}})
	wantErr(t, err, pluginapi.ErrInvalid, "parent wl20.7 is a VLAN on wlan0", "type=ipvlan")
	f.k.Remove("wl20.7")
	f.k.Remove("wl20")
	// A list the wireless link was picked from is named as given.
	err = f.create(netReq{ID: netA, Opts: map[string]string{"parent": "nosuch9,wlan0"}})
	wantErr(t, err, pluginapi.ErrInvalid, `parent "nosuch9,wlan0" resolved to wlan0 on this host`, "name a wired link in -o parent")
	// An internal network on it has no LAN to reach: not refused.
	f.mustCreate(netReq{ID: netInternal, Opts: map[string]string{"parent": "wlan0"}, Internal: true})
	if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: netInternal}); err != nil {
		t.Fatal(err)
	}

	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "wlan0", "allow_wireless": "true"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1", "type": "ipvlan"}})
	if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "wlan0", "type": "ipvlan", "ipvlan_mode": "l2"}})
	f.wantNetworks(netB, netC)

	// A plain parent: the resolver's Get is the one the check reads.
	before := f.k.Calls("get")
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	if n := f.k.Calls("get") - before; n != 1 {
		t.Errorf("a macvlan create on eth0 looked up %d links, want 1 (the resolution's, read again by the wireless check)", n)
	}
}

// After a create, the preflight runs once in the background with the
// network's parent, type, DHCP and gateway, bounded by LANCheckTimeout;
// not for lan_check=false, an internal network without a parent, nor the
// reuse of the same ID.
func TestLANCheckRunsInBackgroundAfterCreate(t *testing.T) {
	f, fl := dhcpFixture(t)
	r := &lanRunner{}
	f.withLANCheck(r)
	f.d.leases.V4.Family = leases.DHCP{Client: fl}

	req := netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "type": "ipvlan", "ipvlan_mode": "l2"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}}
	start := time.Now()
	f.mustCreate(req)
	f.mustCreate(req) // the same ID and configuration: reused
	if err := f.d.CreateNetwork(context.Background(), dhcpNet(netB)); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth1", "lan_check": "false"}})
	f.mustCreate(netReq{ID: "internal", Internal: true, V4: []string{"198.18.9.0/24"}})
	waitFor(t, "two preflights", func() bool { return len(r.called()) >= 2 })
	f.close() // waits for every preflight: nothing more can be called

	calls := r.called()
	if len(calls) != 2 {
		t.Fatalf("preflight called %d times (%+v), want twice: for %s and %s only", len(calls), calls, netA, netB)
	}
	var a, b lancheck.Network
	for _, c := range calls {
		if c.Parent == "eth0" {
			a = c
		} else {
			b = c
		}
	}
	if a.Type != kernel.KindIpvlan || a.Mode != "l2" || a.DHCP || a.Gateway4 != netip.MustParseAddr("198.18.1.1") {
		t.Errorf("preflight of %s got %+v, want eth0, ipvlan l2, no DHCP, gateway 198.18.1.1", netA, a)
	}
	if b.Parent != "lan0" || b.Type != kernel.KindMacvlan || !b.DHCP || b.Gateway4.IsValid() {
		t.Errorf("preflight of %s got %+v, want lan0, macvlan, DHCP, no gateway", netB, b)
	}
	for _, ctx := range r.ctxs {
		if dl, ok := ctx.Deadline(); !ok || dl.Sub(start) > LANCheckTimeout+time.Second {
			t.Errorf("preflight's deadline %v (set %v): want within %v of the create", dl, ok, LANCheckTimeout)
		}
	}
}

// The preflight's result: one WARN line for a network with problems
// (each problem's check, evidence and fix), none for one without; shown
// by the inventory (ls) and as doctor findings, counted by the gauge;
// DeleteNetwork drops it.
func TestLANCheckResultIsLoggedShownAndCounted(t *testing.T) {
	f := newFixture(t)
	r := &lanRunner{items: func(n lancheck.Network) []lancheck.Item {
		if n.Parent == "eth1" {
			return []lancheck.Item{{Check: lancheck.NewMAC, Verdict: lancheck.OK, Evidence: "198.18.1.1 answered a new MAC", Fix: ""}}
		}
		return []lancheck.Item{
			{Check: lancheck.NewMAC, Verdict: lancheck.Problem, Evidence: "198.18.1.1 answered eth0 but not a new MAC 02:00:5e:00:00:01", Fix: "use -o type=ipvlan -o ipvlan_mode=l2"},
			{Check: lancheck.DHCP, Family: "ipv4", Verdict: lancheck.Problem, Evidence: "2 DHCP servers answered", Fix: "find the rogue server"},
			{Check: lancheck.Gateway, Verdict: lancheck.OK, Evidence: "198.18.1.1 answered"},
		}
	}}
	logs := f.withLANCheck(r)
	m := metrics.New(metrics.Options{})
	if err := m.WatchLAN(f.d); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.2.0/24"}})
	ctx := context.Background()
	var inv doctor.Inventory
	waitFor(t, "both preflights' results in the inventory", func() bool {
		var err error
		inv, err = f.d.Inventory(ctx)
		return err == nil && len(inv.LAN[netA]) == 3 && len(inv.LAN[netB]) == 1
	})

	warns := logs.lines("level=WARN")
	if len(warns) != 1 {
		t.Fatalf("WARN lines %q, want one (for %s only)", warns, netA)
	}
	for _, want := range []string{"network=" + netA, "parent=eth0", "problems=new-mac,dhcp/ipv4",
		`new-mac.check=new-mac`, `new-mac.evidence="198.18.1.1 answered eth0 but not a new MAC 02:00:5e:00:00:01"`, `new-mac.fix="use -o type=ipvlan -o ipvlan_mode=l2"`,
		`dhcp/ipv4.evidence="2 DHCP servers answered"`, `dhcp/ipv4.fix="find the rogue server"`} {
		if !strings.Contains(warns[0], want) {
			t.Errorf("WARN line lacks %q:\n%s", want, warns[0])
		}
	}
	if strings.Contains(warns[0], "gateway") {
		t.Errorf("WARN line names the ok check gateway:\n%s", warns[0])
	}

	findings, _ := doctor.Check(doctor.Input{Now: inv.Now, Networks: inv.Networks, Links: inv.Links, Mark: inv.Mark, LAN: inv.LAN,
		HostLinks: inv.HostLinks, Docker: &doctor.Docker{}})
	var lan []doctor.Finding
	for _, fd := range findings {
		if fd.Kind == "lan-check" {
			lan = append(lan, fd)
		}
	}
	if len(lan) != 2 || lan[0].Subject != netA || lan[0].Message != "new-mac: 198.18.1.1 answered eth0 but not a new MAC 02:00:5e:00:00:01" ||
		lan[0].Repair != "none by underlay: use -o type=ipvlan -o ipvlan_mode=l2" || lan[0].Action != nil || !strings.HasSuffix(lan[1].Message, ": 2 DHCP servers answered") {
		t.Errorf("doctor's lan-check findings %+v, want new-mac's and dhcp's of %s, without an action", lan, netA)
	}

	gauge := func() map[string]float64 {
		mfs, err := m.Gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "underlay_lan_check" {
				continue
			}
			for _, s := range mf.GetMetric() {
				lbl := map[string]string{}
				for _, l := range s.GetLabel() {
					lbl[l.GetName()] = l.GetValue()
				}
				out[lbl["check"]+" "+lbl["verdict"]] = s.GetGauge().GetValue()
			}
		}
		return out
	}
	g := gauge()
	for k, want := range map[string]float64{"new-mac problem": 1, "new-mac ok": 1, "dhcp problem": 1, "gateway ok": 1, "wireless ok": 0, "parent unknown": 0} {
		if g[k] != want {
			t.Errorf("underlay_lan_check{%s} = %v, want %v (all: %v)", k, g[k], want, g)
		}
	}
	if len(g) != len(lancheck.Checks)*3 {
		t.Errorf("underlay_lan_check has %d series, want one per check and verdict (%d)", len(g), len(lancheck.Checks)*3)
	}

	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	inv, err := f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inv.LAN[netA]; ok || len(inv.LAN[netB]) != 1 {
		t.Errorf("after DeleteNetwork %s the inventory has %v, want %s's result only", netA, inv.LAN, netB)
	}
	if g := gauge(); g["new-mac problem"] != 0 || g["dhcp problem"] != 0 || g["new-mac ok"] != 1 {
		t.Errorf("after DeleteNetwork the gauge says %v, want only %s counted", g, netB)
	}
}

// A preflight still running when its network is deleted is cancelled and
// its result dropped; one running at the driver's Close is cancelled and
// waited for.
func TestLANCheckCancelledAtDeleteAndWaitedForAtClose(t *testing.T) {
	f := newFixture(t)
	r := &lanRunner{hold: true, items: func(lancheck.Network) []lancheck.Item {
		return []lancheck.Item{{Check: lancheck.DHCP, Verdict: lancheck.Problem, Evidence: "no DHCP server answered"}}
	}}
	buf := f.withLANCheck(r)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	waitFor(t, "the preflight of "+netA+" to start", func() bool { return len(r.called()) == 1 })
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the preflight of the deleted "+netA+" to end", func() bool { return r.ended.Load() == 1 })
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1"}})
	waitFor(t, "the preflight of "+netB+" to start", func() bool { return len(r.called()) == 2 })
	if inv, err := f.d.Inventory(ctx); err != nil || len(inv.LAN) != 0 {
		t.Fatalf("inventory's LAN %v (%v): want nothing (one dropped, one running)", inv.LAN, err)
	}
	if c := f.d.LANCheckCounts(); c[[2]string{"dhcp", "problem"}] != 0 {
		t.Errorf("counts %v: the deleted network's late result counted", c)
	}
	done := make(chan struct{})
	go func() {
		f.d.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(LANCheckTimeout / 2):
		t.Fatal("Close did not cancel the running preflight")
	}
	if r.ended.Load() != 2 {
		t.Fatalf("Close returned before the running preflight ended (%d of 2 ended)", r.ended.Load())
	}
	// What the runs cut short saw proves nothing: not logged, not kept.
	if got := buf.lines("LAN preflight found problems"); len(got) != 0 {
		t.Errorf("cancelled preflights logged problems: %q", got)
	}
	if res := f.d.LANChecks(); len(res) != 0 {
		t.Errorf("cancelled preflights kept results: %v", res)
	}
}

// Close runs none of the preflights still queued; an internal network
// gets none.
func TestLANCheckQueuedAtCloseNeverRuns(t *testing.T) {
	f := newFixture(t)
	r := &lanRunner{hold: true}
	f.withLANCheck(r)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth1"}, Internal: true})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}})
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth1"}})
	waitFor(t, "the first preflight to start", func() bool { return len(r.called()) == 1 })
	f.d.Close()
	time.Sleep(3 * lanCheckSettle)
	if got := r.called(); len(got) != 1 || got[0].Parent != "eth0" {
		t.Fatalf("preflights run %+v: want only %s's (the internal network none, the queued one not at Close)", got, netB)
	}
}

// A create that replaces a network of the same ID (another configuration)
// cancels the old preflight and runs a new one.
func TestLANCheckRunsAgainWhenTheNetworkIsReplaced(t *testing.T) {
	f := newFixture(t)
	r := &lanRunner{hold: true}
	f.withLANCheck(r)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	waitFor(t, "the first preflight", func() bool { return len(r.called()) == 1 })
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "type": "ipvlan"}})
	waitFor(t, "the first preflight cancelled and a second started", func() bool { return r.ended.Load() == 1 && len(r.called()) == 2 })
	if c := r.called(); c[1].Type != kernel.KindIpvlan {
		t.Errorf("second preflight got %+v, want the ipvlan network", c[1])
	}
}

// A burst of creates is not overlapped by preflights: they start once no
// create has come for lanCheckSettle, one at a time, in the creates'
// order.
func TestLANChecksRunOneAtATimeOnceTheCreatesSettle(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	running, most := 0, 0
	var starts []time.Time
	r := &lanRunner{items: func(lancheck.Network) []lancheck.Item {
		mu.Lock()
		running++
		most = max(most, running)
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}}
	f.withLANCheck(r)
	for i, id := range []string{netA, netB, netC} {
		f.mustCreate(netReq{ID: id, Opts: map[string]string{"parent": "eth0"}, V4: []string{fmt.Sprintf("198.18.%d.0/24,198.18.%d.1/24", 10+i, 10+i)}})
	}
	lastCreate := time.Now()
	waitFor(t, "three preflights", func() bool { return len(r.called()) == 3 })
	f.close()
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d preflights ran at once, want 1", most)
	}
	if first := starts[0]; first.Before(lastCreate.Add(lanCheckSettle - 10*time.Millisecond)) {
		t.Errorf("the first preflight started %v after the last create, want %v or more", first.Sub(lastCreate), lanCheckSettle)
	}
	for i, c := range r.called() {
		if want := fmt.Sprintf("198.18.%d.1", 10+i); c.Gateway4.String() != want || i > 0 && !starts[i].After(starts[i-1]) {
			t.Errorf("preflight %d: %+v at %v, want the network of gateway %s after the one before", i, c, starts[i], want)
		}
	}
}

// netInternal is an internal network of the wireless tests.
const netInternal = "dddddddddddd0000000000000000000000000000000000000000000000000004"
