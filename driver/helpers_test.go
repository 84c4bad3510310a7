package driver

import (
	"context"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// fakeDocker answers NetworkExists from a set of live IDs, or through
// answer when set (called without the lock held).
type fakeDocker struct {
	mu     sync.Mutex
	live   map[string]bool
	err    error
	calls  int
	answer func(ctx context.Context, id string) (bool, error)
}

func (f *fakeDocker) NetworkExists(ctx context.Context, id string) (bool, error) {
	f.mu.Lock()
	f.calls++
	answer := f.answer
	f.mu.Unlock()
	if answer != nil {
		return answer(ctx, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	return f.live[id], nil
}

func (f *fakeDocker) setLive(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = map[string]bool{}
	for _, id := range ids {
		f.live[id] = true
	}
}

type fixture struct {
	t      testing.TB
	d      *Driver
	k      *nltest.Kernel
	db     *store.DB
	path   string
	docker *fakeDocker
	clock  *fakeclock.Clock
	grace  time.Duration
	boot   string
	points []string
	mu     sync.Mutex
	// dhcp6 is the DHCPv6 client open gives the driver (ipv6_test.go);
	// dhcp4 the DHCP client (ipamdhcp_test.go).
	dhcp6 leases.Client6
	dhcp4 *dhcp.Client
	// events, when set before open, is told what the driver does.
	events Events
	// lanCheck, when set before open, runs the background LAN preflight;
	// logger, when set, is the driver's logger.
	lanCheck LANChecker
	logger   *slog.Logger
	// links, when set before open, is the driver's kernel instead of k
	// (k wrapped: containers_test.go's sandboxes).
	links netlinkutil.Links
}

// newFixture returns a driver over a fake kernel holding eth0 and eth1
// (MTU 1500) and a real state file in a temp dir.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	k := nltest.New()
	k.AddHostLink("eth0", "device", 1500)
	k.AddHostLink("eth1", "device", 9000)
	f := &fixture{t: t, k: k, path: filepath.Join(t.TempDir(), "underlay.db"), docker: &fakeDocker{live: map[string]bool{}},
		clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), grace: time.Millisecond, boot: "boot-1"}
	f.open()
	t.Cleanup(f.close)
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	db, err := store.Open(f.path, store.Options{LockTimeout: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	var links netlinkutil.Links = f.k
	if f.links != nil {
		links = f.links
	}
	d, err := New(Config{Store: db, Links: links, Docker: f.docker, Now: f.clock.Now, Instance: db.InstanceID(), StaleGrace: f.grace, BootID: f.boot, DHCPv6: f.dhcp6, DHCP: f.dhcp4, Events: f.events, LANCheck: f.lanCheck, Logger: f.logger, CrashPoint: func(p string) {
		f.mu.Lock()
		f.points = append(f.points, p)
		f.mu.Unlock()
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.db, f.d = db, d
}

// count opens the driver again with ev told what it does (its
// components are told from the start).
func (f *fixture) count(ev Events) {
	f.t.Helper()
	f.close()
	f.events = ev
	f.open()
}

func (f *fixture) close() {
	if f.d != nil {
		f.d.Close()
		_ = f.db.Close()
		f.d, f.db = nil, nil
	}
}

// restart closes and reopens the state file and runs Restore, as a new
// process would.
// killedAt runs do as if the daemon were killed -9 at the crash point
// named point: do stops there, and nothing after it runs.
func (f *fixture) killedAt(point string, do func()) {
	f.d.crash = func(p string) {
		if p == point {
			panic("kill -9")
		}
	}
	defer func() { f.d.crash = nil }()
	defer func() { _ = recover() }()
	do()
}

func (f *fixture) restart() {
	f.t.Helper()
	f.close()
	f.open()
	if err := f.d.Restore(context.Background()); err != nil {
		f.t.Fatalf("Restore: %v", err)
	}
}

func (f *fixture) create(r netReq) error {
	if r.V4 == nil && r.V6 == nil {
		r.V4 = []string{"198.18.1.0/24,198.18.1.1/24"}
	}
	return f.d.CreateNetwork(context.Background(), createReq(r))
}

func (f *fixture) mustCreate(r netReq) {
	f.t.Helper()
	if err := f.create(r); err != nil {
		f.t.Fatalf("CreateNetwork %s: %v", r.ID, err)
	}
}

func (f *fixture) endpoint(netID, epID, addr, mac string) (*network.CreateEndpointResponse, error) {
	return f.d.CreateEndpoint(context.Background(), &network.CreateEndpointRequest{
		NetworkID: netID, EndpointID: epID, Interface: &network.EndpointInterface{Address: addr, MacAddress: mac}})
}

func (f *fixture) join(netID, epID string) (*plan.JoinResponse, error) {
	return f.d.Join(context.Background(), &network.JoinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/x"})
}

// mustEndpoint creates and joins an endpoint and returns its link name.
func (f *fixture) mustEndpoint(netID, epID, addr string) string {
	f.t.Helper()
	if _, err := f.endpoint(netID, epID, addr, ""); err != nil {
		f.t.Fatalf("CreateEndpoint: %v", err)
	}
	resp, err := f.join(netID, epID)
	if err != nil {
		f.t.Fatalf("Join: %v", err)
	}
	return resp.InterfaceName.SrcName
}

// networks returns the stored network IDs, sorted.
func (f *fixture) networks() []string {
	f.t.Helper()
	var ids []string
	if err := f.db.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error { ids = append(ids, n.ID); return nil })
	}); err != nil {
		f.t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

func (f *fixture) record(id string) (record.Network, bool) {
	f.t.Helper()
	var n record.Network
	var ok bool
	if err := f.db.View(func(tx *store.Tx) (err error) { n, ok, err = tx.Network(id); return err }); err != nil {
		f.t.Fatal(err)
	}
	return n, ok
}

func (f *fixture) wantLinks(want ...string) {
	f.t.Helper()
	want = append(want, "lo", "eth0", "eth1")
	sort.Strings(want)
	got := f.k.Names()
	if len(got) != len(want) {
		f.t.Fatalf("kernel links = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			f.t.Fatalf("kernel links = %v, want %v", got, want)
		}
	}
}

func (f *fixture) wantNetworks(want ...string) {
	f.t.Helper()
	sort.Strings(want)
	got := f.networks()
	if len(got) != len(want) {
		f.t.Fatalf("stored networks = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			f.t.Fatalf("stored networks = %v, want %v", got, want)
		}
	}
}

// The IDs, requests and error check the internal packages' tests use too.
const (
	netA = drivertest.NetA
	netB = drivertest.NetB
	netC = drivertest.NetC
	epA  = drivertest.EpA
	epB  = drivertest.EpB
	epC  = drivertest.EpC
	epD  = drivertest.EpD
)

type netReq = drivertest.NetReq

func createReq(r netReq) *network.CreateNetworkRequest { return drivertest.CreateReq(r) }

func wantErr(t *testing.T, err, kind error, substrings ...string) {
	t.Helper()
	drivertest.WantErr(t, err, kind, substrings...)
}
