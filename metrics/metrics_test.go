package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// scrape GETs Path from h and returns the status and the text.
func scrape(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path, nil))
	body, _ := io.ReadAll(w.Body)
	return w.Code, string(body)
}

func TestEventsAndRequestsAreCounted(t *testing.T) {
	m := New(Options{Version: "v1.2.3"})
	m.ObserveRequest("NetworkDriver.CreateNetwork", "ok", 3*time.Millisecond)
	m.ObserveRequest("NetworkDriver.CreateNetwork", "ok", 4*time.Millisecond)
	m.ObserveRequest("NetworkDriver.CreateNetwork", "conflict", time.Millisecond)
	m.ObserveRequest("IpamDriver.RequestPool", "invalid", time.Millisecond)
	m.ConflictRefused()
	m.StaleRemoved()
	m.StaleRemoved()
	m.ReservationRolledBack("network")
	m.ReservationRolledBack("ipam")
	m.ReservationRolledBack("ipam")
	m.ReconcileAction("rollback")
	m.ReconcileAction("recreate")
	m.ReconcileAction("recreate")
	m.RepairAction("shim")
	m.ObserveCommit(200 * time.Microsecond)
	m.AddressInUseOnLAN()
	m.AddressInUseOnLAN()

	want := `
# HELP underlay_build_info Always 1; its label is the running underlay's version.
# TYPE underlay_build_info gauge
underlay_build_info{version="v1.2.3"} 1
# HELP underlay_conflicts_refused_total CreateNetwork requests refused because live networks hold the parent in a conflicting way.
# TYPE underlay_conflicts_refused_total counter
underlay_conflicts_refused_total 1
# HELP underlay_ipam_probe_conflicts_total Addresses the IPAM chose on a LAN pool, probed, and skipped because another host on the LAN answered for them.
# TYPE underlay_ipam_probe_conflicts_total counter
underlay_ipam_probe_conflicts_total 2
# HELP underlay_reconcile_actions_total Steps of the start-up reconcile plan carried out, by op.
# TYPE underlay_reconcile_actions_total counter
underlay_reconcile_actions_total{op="delete-stray"} 0
underlay_reconcile_actions_total{op="follow"} 0
underlay_reconcile_actions_total{op="forget"} 0
underlay_reconcile_actions_total{op="heal"} 0
underlay_reconcile_actions_total{op="keep"} 0
underlay_reconcile_actions_total{op="recreate"} 2
underlay_reconcile_actions_total{op="release"} 0
underlay_reconcile_actions_total{op="repoint"} 0
underlay_reconcile_actions_total{op="rollback"} 1
underlay_reconcile_actions_total{op="routes"} 0
underlay_reconcile_actions_total{op="shim"} 0
# HELP underlay_repair_actions_total Steps of live-repair passes carried out, by op.
# TYPE underlay_repair_actions_total counter
underlay_repair_actions_total{op="follow"} 0
underlay_repair_actions_total{op="heal"} 0
underlay_repair_actions_total{op="recreate"} 0
underlay_repair_actions_total{op="shim"} 1
# HELP underlay_requests_total Plugin API requests answered, by route (NetworkDriver.* and IpamDriver.*) and outcome (ok, invalid, conflict, error).
# TYPE underlay_requests_total counter
underlay_requests_total{outcome="conflict",route="NetworkDriver.CreateNetwork"} 1
underlay_requests_total{outcome="invalid",route="IpamDriver.RequestPool"} 1
underlay_requests_total{outcome="ok",route="NetworkDriver.CreateNetwork"} 2
# HELP underlay_reservations_rolled_back_total Reservations rolled back: kind=network for half-created networks (at start or past their deadline), kind=ipam for automatic pools Docker never confirmed.
# TYPE underlay_reservations_rolled_back_total counter
underlay_reservations_rolled_back_total{kind="ipam"} 2
underlay_reservations_rolled_back_total{kind="network"} 1
# HELP underlay_stale_holders_removed_total Conflicting networks Docker no longer knows, removed before a create.
# TYPE underlay_stale_holders_removed_total counter
underlay_stale_holders_removed_total 2
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want),
		"underlay_build_info", "underlay_conflicts_refused_total", "underlay_ipam_probe_conflicts_total", "underlay_reconcile_actions_total", "underlay_repair_actions_total",
		"underlay_requests_total", "underlay_reservations_rolled_back_total", "underlay_stale_holders_removed_total"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"underlay_request_duration_seconds": 3, "underlay_store_commit_seconds": 1} {
		if n, err := testutil.GatherAndCount(m.Gatherer(), name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	code, text := scrape(t, m.Handler())
	for _, line := range []string{
		`underlay_request_duration_seconds_count{outcome="ok",route="NetworkDriver.CreateNetwork"} 2`,
		`underlay_request_duration_seconds_sum{outcome="ok",route="NetworkDriver.CreateNetwork"} 0.007`,
		`underlay_store_commit_seconds_bucket{le="0.0002"} 1`,
		`underlay_store_commit_seconds_count 1`,
	} {
		if code != 200 || !strings.Contains(text, line+"\n") {
			t.Errorf("scrape (%d) lacks %q:\n%s", code, line, text)
		}
	}
}

// TestCountersStartAtZero: before any event, the counters' documented
// label values have series at 0 (an alert on their increase needs no first
// event to see the first one), and an undocumented op still gets its
// series when counted.
func TestCountersStartAtZero(t *testing.T) {
	m := New(Options{Version: "v1"})
	want := `
# HELP underlay_container_repairs_total Containers' interfaces after their parent link was deleted, by result: repaired (made again in the container), failed (not on the parent as it came back), gone (the container's namespace was gone: left alone), abandoned (the parent did not come back in time).
# TYPE underlay_container_repairs_total counter
underlay_container_repairs_total{result="abandoned"} 0
underlay_container_repairs_total{result="failed"} 0
underlay_container_repairs_total{result="gone"} 0
underlay_container_repairs_total{result="repaired"} 0
# HELP underlay_reconcile_actions_total Steps of the start-up reconcile plan carried out, by op.
# TYPE underlay_reconcile_actions_total counter
underlay_reconcile_actions_total{op="delete-stray"} 0
underlay_reconcile_actions_total{op="follow"} 0
underlay_reconcile_actions_total{op="forget"} 0
underlay_reconcile_actions_total{op="heal"} 0
underlay_reconcile_actions_total{op="keep"} 0
underlay_reconcile_actions_total{op="recreate"} 0
underlay_reconcile_actions_total{op="release"} 0
underlay_reconcile_actions_total{op="repoint"} 0
underlay_reconcile_actions_total{op="rollback"} 0
underlay_reconcile_actions_total{op="routes"} 0
underlay_reconcile_actions_total{op="shim"} 0
# HELP underlay_repair_actions_total Steps of live-repair passes carried out, by op.
# TYPE underlay_repair_actions_total counter
underlay_repair_actions_total{op="follow"} 0
underlay_repair_actions_total{op="heal"} 0
underlay_repair_actions_total{op="recreate"} 0
underlay_repair_actions_total{op="shim"} 0
# HELP underlay_reservations_rolled_back_total Reservations rolled back: kind=network for half-created networks (at start or past their deadline), kind=ipam for automatic pools Docker never confirmed.
# TYPE underlay_reservations_rolled_back_total counter
underlay_reservations_rolled_back_total{kind="ipam"} 0
underlay_reservations_rolled_back_total{kind="network"} 0
`
	names := []string{"underlay_container_repairs_total", "underlay_reconcile_actions_total", "underlay_repair_actions_total", "underlay_reservations_rolled_back_total"}
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	m.RepairAction("heal")
	m.ContainerRepair("failed")
	_, text := scrape(t, m.Handler())
	for _, line := range []string{`underlay_repair_actions_total{op="heal"} 1`, `underlay_container_repairs_total{result="failed"} 1`, `underlay_repair_actions_total{op="shim"} 0`} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, text)
		}
	}
}

func TestStateGauges(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *store.Tx) error {
		a := record.Network{ID: "a", Type: "macvlan", Parent: "eth0.10", Mode: "bridge", HostAddress: "198.18.1.2"}
		b := record.Network{ID: "b", Type: "macvlan", Parent: "eth1", Mode: "bridge"}
		for _, n := range []record.Network{a, b} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for _, ep := range []record.Endpoint{{NetworkID: "a", ID: "e1", Link: "ule1"}, {NetworkID: "b", ID: "e2", Link: "ule2"}, {NetworkID: "b", ID: "e3", Link: "ule3"}} {
			if err := tx.PutEndpoint(ep); err != nil {
				return err
			}
		}
		return tx.PutParentLink(record.ParentLink{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10})
	}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Runtime: true})
	if err := m.WatchState(db); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchState(db); err == nil {
		t.Fatal("the state gauges registered twice")
	}
	want := `
# HELP underlay_endpoints Endpoints in the state file.
# TYPE underlay_endpoints gauge
underlay_endpoints 3
# HELP underlay_networks Networks in the state file (those being created included).
# TYPE underlay_networks gauge
underlay_networks 2
# HELP underlay_owned_links Links underlay owns by its records: the parent links it created, the endpoints' links and the host links.
# TYPE underlay_owned_links gauge
underlay_owned_links 5
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "underlay_networks", "underlay_endpoints", "underlay_owned_links"); err != nil {
		t.Fatal(err)
	}
	// The runtime collectors are there too.
	if _, text := scrape(t, m.Handler()); !strings.Contains(text, "\ngo_goroutines ") || !strings.Contains(text, "\nprocess_resident_memory_bytes ") {
		t.Errorf("no go_ or process_ metrics in:\n%s", text)
	}
}

func TestLeaseStateGauge(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	lease := func(t1, t2, exp time.Duration, lost bool) *record.Lease {
		l := &record.Lease{Addr: "198.18.180.10/24", T1: now.Add(t1), T2: now.Add(t2), Expiry: now.Add(exp)}
		if lost {
			l.Lost = now.Add(-time.Minute)
		}
		return l
	}
	if err := db.Update(func(tx *store.Tx) error {
		for _, n := range []record.Network{{ID: "d", Type: "macvlan", Parent: "eth0", Mode: "bridge", Options: map[string]string{"dhcp": "true"}, Config: record.NetworkConfig{DHCP: record.DHCPConfig{On: true}}}, {ID: "s", Type: "macvlan", Parent: "eth1", Mode: "bridge"}} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for i, l := range []*record.Lease{lease(time.Hour, 2*time.Hour, 3*time.Hour, false), lease(time.Hour, 2*time.Hour, 3*time.Hour, false),
			lease(-time.Hour, time.Hour, 2*time.Hour, false), lease(-2*time.Hour, -time.Hour, time.Hour, false),
			lease(time.Hour, 2*time.Hour, 3*time.Hour, true), lease(-3*time.Hour, -2*time.Hour, -time.Hour, false)} {
			if err := tx.PutEndpoint(record.Endpoint{NetworkID: "d", ID: fmt.Sprintf("e%d", i), Link: fmt.Sprintf("ule%d", i), Lease: l}); err != nil {
				return err
			}
		}
		return tx.PutEndpoint(record.Endpoint{NetworkID: "s", ID: "x", Link: "ulex"})
	}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{})
	if err := m.WatchState(db); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP underlay_dhcp_leases DHCP leases of endpoints by state: bound (before T1), renewing (T1 to T2), rebinding (T2 to the expiry), lost (expired or refused: the address is blocked until won back).
# TYPE underlay_dhcp_leases gauge
underlay_dhcp_leases{state="bound"} 2
underlay_dhcp_leases{state="lost"} 2
underlay_dhcp_leases{state="rebinding"} 1
underlay_dhcp_leases{state="renewing"} 1
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "underlay_dhcp_leases"); err != nil {
		t.Fatal(err)
	}
}

// TestLease6StateGauge: DHCPv6 leases are counted by state in their own
// gauge, underlay_dhcp6_leases (underlay_dhcp_leases keeps its series:
// DHCP only), and only on ipv6_mode=dhcpv6 networks; every state has a
// series, 0 included.
func TestLease6StateGauge(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	lease6 := func(acquired, valid time.Duration, lost bool) *record.Lease6 {
		l := &record.Lease6{Addr: "2001:db8::10", Acquired: now.Add(acquired), T1: time.Hour, T2: 2 * time.Hour, Preferred: valid, Valid: valid}
		if lost {
			l.Lost = now.Add(-time.Minute)
		}
		if valid == record.Infinite6 {
			l.T1, l.T2 = record.Infinite6, record.Infinite6
		}
		return l
	}
	if err := db.Update(func(tx *store.Tx) error {
		for _, n := range []record.Network{
			{ID: "v6", Type: "macvlan", Parent: "eth0", Mode: "bridge", Options: map[string]string{"ipv6_mode": "dhcpv6"},
				Config: record.NetworkConfig{IPv6Mode: "dhcpv6"}},
			{ID: "ds", Type: "macvlan", Parent: "eth1", Mode: "bridge", Options: map[string]string{"ipv6_mode": "dhcpv6", "dhcp": "true"},
				Config: record.NetworkConfig{IPv6Mode: "dhcpv6", DHCP: record.DHCPConfig{On: true}}},
			{ID: "sl", Type: "macvlan", Parent: "eth2", Mode: "bridge", Options: map[string]string{"ipv6_mode": "slaac"},
				Config: record.NetworkConfig{IPv6Mode: "slaac"}},
		} {
			if err := tx.PutNetwork(n); err != nil {
				return err
			}
		}
		for i, l := range []*record.Lease6{lease6(0, 3*time.Hour, false), lease6(-90*time.Minute, 3*time.Hour, false),
			lease6(-150*time.Minute, 3*time.Hour, false), lease6(0, 3*time.Hour, true), lease6(-4*time.Hour, 3*time.Hour, false),
			lease6(-100*365*24*time.Hour, record.Infinite6, false)} {
			if err := tx.PutEndpoint(record.Endpoint{NetworkID: "v6", ID: fmt.Sprintf("e%d", i), Link: fmt.Sprintf("ule%d", i), Lease6: l}); err != nil {
				return err
			}
		}
		// Dual stack: one of each family.
		if err := tx.PutEndpoint(record.Endpoint{NetworkID: "ds", ID: "d", Link: "uled", Lease6: lease6(0, 3*time.Hour, false),
			Lease: &record.Lease{Addr: "198.18.180.10/24", T1: now.Add(time.Hour), T2: now.Add(2 * time.Hour), Expiry: now.Add(3 * time.Hour)}}); err != nil {
			return err
		}
		// A record on a slaac network holds no lease of the network's.
		return tx.PutEndpoint(record.Endpoint{NetworkID: "sl", ID: "x", Link: "ulex", Lease6: lease6(0, 3*time.Hour, false)})
	}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{})
	if err := m.WatchState(db); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP underlay_dhcp6_leases DHCPv6 leases of endpoints of ipv6_mode=dhcpv6 networks by state: bound (before T1), renewing (T1 to T2), rebinding (T2 to the end of the valid lifetime), lost (expired, or the server no longer holds it: the address is blocked until won back).
# TYPE underlay_dhcp6_leases gauge
underlay_dhcp6_leases{state="bound"} 3
underlay_dhcp6_leases{state="lost"} 2
underlay_dhcp6_leases{state="rebinding"} 1
underlay_dhcp6_leases{state="renewing"} 1
# HELP underlay_dhcp_leases DHCP leases of endpoints by state: bound (before T1), renewing (T1 to T2), rebinding (T2 to the expiry), lost (expired or refused: the address is blocked until won back).
# TYPE underlay_dhcp_leases gauge
underlay_dhcp_leases{state="bound"} 1
underlay_dhcp_leases{state="lost"} 0
underlay_dhcp_leases{state="rebinding"} 0
underlay_dhcp_leases{state="renewing"} 0
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "underlay_dhcp6_leases", "underlay_dhcp_leases"); err != nil {
		t.Fatal(err)
	}
}

// failingState cannot be read.
type failingState struct{}

func (failingState) View(func(*store.Tx) error) error { return errors.New("disk gone") }

// TestStateUnreadableServesTheRest: a failed read of the state is logged
// and leaves the gauges out; every other metric is still served.
func TestStateUnreadableServesTheRest(t *testing.T) {
	var logs bytes.Buffer
	m := New(Options{Version: "x", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := m.WatchState(failingState{}); err != nil {
		t.Fatal(err)
	}
	m.ConflictRefused()
	code, text := scrape(t, m.Handler())
	if code != 200 || !strings.Contains(text, "underlay_conflicts_refused_total 1\n") || strings.Contains(text, "underlay_networks") {
		t.Fatalf("scrape %d:\n%s", code, text)
	}
	if !strings.Contains(logs.String(), "disk gone") {
		t.Fatalf("the failure was not logged: %q", logs.String())
	}
}

func TestRegisterServesGETOnly(t *testing.T) {
	m := New(Options{})
	mux := http.NewServeMux()
	m.Register(mux)
	if code, text := scrape(t, mux); code != 200 || !strings.Contains(text, "underlay_build_info") {
		t.Fatalf("GET %s: %d %q", Path, code, text)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path, nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST %s: %d", Path, w.Code)
	}
}
