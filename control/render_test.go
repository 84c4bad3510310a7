package control

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/ipam"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

func TestListing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := State{Version: "v1", Inventory: doctor.Inventory{Now: now, Boot: "b2",
		Networks: []record.Network{
			{ID: "bbbbbbbbbbbb1", Type: "ipvlan", Mode: "l2", Flag: "bridge", Parent: "eth0.10", Options: map[string]string{"parent": "auto.10"},
				IPv4: []record.Pool{{Subnet: "198.18.2.0/24"}}, Pending: &record.Reservation{Deadline: now.Add(time.Minute)}},
			{ID: "aaaaaaaaaaaa1", Type: "macvlan", Mode: "bridge", Parent: "eth0", Options: map[string]string{"parent": "eth0"}, MTU: 1400,
				IPv4: []record.Pool{{Subnet: "198.18.1.0/24"}}, IPv6: []record.Pool{{Subnet: "2001:db8:1::/64"}}, Created: now},
		},
		Endpoints: []record.Endpoint{
			{NetworkID: "aaaaaaaaaaaa1", ID: "e1", Link: "ule1", MAC: "02:00:00:00:00:01", IPv4: "198.18.1.10/24", Sandbox: "/x", Boot: "b2"},
			{NetworkID: "aaaaaaaaaaaa1", ID: "e2", Link: "ule2", Sandbox: "/y", Boot: "b1",
				Lease: &record.Lease{Addr: "198.18.1.11/24", Expiry: now.Add(time.Hour), Lost: now.Add(-time.Minute)}},
		},
		Owned: []record.ParentLink{{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10}},
		Links: []kernel.Link{{Name: "eth0"}},
	}, Pools: []ipam.PoolState{{IPAMPool: store.IPAMPool{ID: "p1", Space: "underlay-local", Prefix: "198.18.1.0/24", Auto: true}, Addresses: []string{"198.18.1.1", "198.18.1.10"}}},
		Names: []ipam.NameState{{Space: "underlay-local", Subnet: "198.18.1.0/24", Name: "web-1", Address: "198.18.1.10", LastUsed: now, Held: true},
			{Space: "underlay-local", Subnet: "198.18.1.0/24", Name: "db-1", Address: "198.18.1.11", LastUsed: now, Until: now.Add(720 * time.Hour)}}}
	l := listing(st, dockerView{names: map[string]string{"aaaaaaaaaaaa1": "lan"}})
	if len(l.Networks) != 2 || l.Networks[0].ID != "aaaaaaaaaaaa1" {
		t.Fatalf("networks %+v, want both sorted by ID", l.Networks)
	}
	a, b := l.Networks[0], l.Networks[1]
	if a.Name != "lan" || a.Parent != "eth0" || a.Link != "eth0" || a.MTU != 1400 || strings.Join(a.Subnets, " ") != "198.18.1.0/24 2001:db8:1::/64" {
		t.Errorf("network A: %+v", a)
	}
	if len(a.Endpoints) != 2 || !a.Endpoints[0].Joined || a.Endpoints[1].Joined {
		t.Errorf("endpoints %+v: want e1 joined (this boot), e2 not (an earlier boot)", a.Endpoints)
	}
	if a.Endpoints[0].Lease != "" || a.Endpoints[1].Lease != record.LeaseLost {
		t.Errorf("lease states %q, %q: want none for e1, lost for e2", a.Endpoints[0].Lease, a.Endpoints[1].Lease)
	}
	if b.Parent != "auto.10" || b.Link != "eth0.10" || !b.PendingTill.Equal(now.Add(time.Minute)) || b.Endpoints == nil {
		t.Errorf("network B: %+v", b)
	}
	if len(l.ParentLinks) != 1 || l.ParentLinks[0].Present || strings.Join(l.ParentLinks[0].Networks, ",") != "bbbbbbbbbbbb1" {
		t.Errorf("parent links %+v: want eth0.10, absent, used by B", l.ParentLinks)
	}
	if len(l.Names) != 2 || l.Names[0].Name != "web-1" || !l.Names[0].Held || !l.Names[1].LastUsed.Equal(now) || !l.Names[1].KeptUntil.Equal(now.Add(720*time.Hour)) {
		t.Errorf("names %+v", l.Names)
	}
	if len(l.Pools) != 1 || len(l.Pools[0].Addresses) != 2 || !l.Docker.Reachable {
		t.Errorf("pools %+v, docker %+v", l.Pools, l.Docker)
	}
	var buf bytes.Buffer
	printListing(&buf, l)
	for _, want := range []string{"aaaaaaaaaaaa  lan", "macvlan/bridge", "ipvlan/l2/bridge", "auto.10", "198.18.1.10/24", "eth0.10", "p1", "LEASE", "lost",
		"STICKY NAME", "web-1        198.18.1.0/24  198.18.1.10  yes", "db-1         198.18.1.0/24  198.18.1.11  no    2026-11-30T12:00:00Z  2026-12-30T12:00:00Z"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestFindSocket(t *testing.T) {
	dir := t.TempDir()
	touch := func(p string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	def := filepath.Join(dir, "underlay.sock")
	glob := filepath.Join(dir, "plugins", "*", "underlay.sock")
	if _, err := FindSocket("", def, glob); err == nil || !strings.Contains(err.Error(), "is underlay running") {
		t.Errorf("nothing there: %v", err)
	}
	one := touch(filepath.Join(dir, "plugins", "p1", "underlay.sock"))
	if got, err := FindSocket("", def, glob); err != nil || got != one {
		t.Errorf("one managed plugin: %q, %v", got, err)
	}
	two := touch(filepath.Join(dir, "plugins", "p2", "underlay.sock"))
	if _, err := FindSocket("", def, glob); err == nil || !strings.Contains(err.Error(), one) || !strings.Contains(err.Error(), two) {
		t.Errorf("two managed plugins: %v, want both named", err)
	}
	touch(def)
	if got, err := FindSocket("", def, glob); err != nil || got != def {
		t.Errorf("default socket: %q, %v", got, err)
	}
	if _, err := FindSocket(filepath.Join(dir, "nope.sock"), def, glob); err == nil || !strings.Contains(err.Error(), "nope.sock") {
		t.Errorf("given socket missing: %v", err)
	}
}

// TestListingLease6: a DHCPv6 lease is in ls as the DHCP one is, beside
// it: its state in the endpoints' table (LEASE6) and in JSON, and its
// address, DUID, IAID, times and loss in the DHCPv6 table and in JSON's
// lease6 object; the DHCP lease's fields keep their names.
func TestListingLease6(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	acq := now.Add(-90 * time.Second)
	st := State{Version: "v1", Inventory: doctor.Inventory{Now: now, Boot: "b1",
		Networks: []record.Network{{ID: "aaaaaaaaaaaa1", Type: "macvlan", Mode: "bridge", Parent: "eth0", Options: map[string]string{"parent": "eth0", "ipv6_mode": "dhcpv6", "dhcp": "true"}}},
		Endpoints: []record.Endpoint{
			{NetworkID: "aaaaaaaaaaaa1", ID: "e1", Link: "ule1", MAC: "02:00:00:00:00:01", IPv4: "198.18.1.10/24", IPv6: "2001:db8::10/128",
				Lease: &record.Lease{Addr: "198.18.1.10/24", T1: now.Add(time.Minute), T2: now.Add(2 * time.Minute), Expiry: now.Add(time.Hour)},
				Lease6: &record.Lease6{Addr: "2001:db8::10", DUID: "00030001020000000001", IAID: "0a0b0c0d", ServerID: "000100aa", Acquired: acq,
					T1: time.Minute, T2: 2 * time.Minute, Preferred: 3 * time.Minute, Valid: 4 * time.Minute}},
			{NetworkID: "aaaaaaaaaaaa1", ID: "e2", Link: "ule2", IPv6: "2001:db8::11/128",
				Lease6: &record.Lease6{Addr: "2001:db8::11", DUID: "0004aa", IAID: "01020304", Acquired: acq, T1: record.Infinite6, T2: record.Infinite6,
					Preferred: record.Infinite6, Valid: record.Infinite6, Lost: now.Add(-time.Minute), LostWhy: "NoBinding at the renewal"}},
			{NetworkID: "aaaaaaaaaaaa1", ID: "e3", Link: "ule3", IPv4: "198.18.1.12/24"},
		}}}
	l := listing(st, dockerView{})
	eps := l.Networks[0].Endpoints
	if len(eps) != 3 {
		t.Fatalf("endpoints %+v", eps)
	}
	want1 := Lease6Entry{State: record.LeaseRenewing, Address: "2001:db8::10", DUID: "00030001020000000001", IAID: "0a0b0c0d", Server: "000100aa",
		Acquired: acq, T1: acq.Add(time.Minute), T2: acq.Add(2 * time.Minute), Preferred: acq.Add(3 * time.Minute), Expiry: acq.Add(4 * time.Minute)}
	if eps[0].Lease != record.LeaseBound || eps[0].Lease6 == nil || *eps[0].Lease6 != want1 {
		t.Errorf("e1: lease %q, lease6 %+v; want bound and %+v", eps[0].Lease, eps[0].Lease6, want1)
	}
	if l6 := eps[1].Lease6; l6 == nil || l6.State != record.LeaseLost || !l6.T1.IsZero() || !l6.Expiry.IsZero() || !l6.Lost.Equal(now.Add(-time.Minute)) || l6.LostWhy == "" || eps[1].Lease != "" {
		t.Errorf("e2: lease %q, lease6 %+v; want none and a lost lease6 with no T1 or expiry (infinite)", eps[1].Lease, l6)
	}
	if eps[2].Lease6 != nil {
		t.Errorf("e3 has no DHCPv6 lease, listed %+v", eps[2].Lease6)
	}

	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{`"lease":"bound"`, `"lease6":{"state":"renewing","address":"2001:db8::10","duid":"00030001020000000001","iaid":"0a0b0c0d","server":"000100aa","acquired":"2026-11-30T11:58:30Z","t1":"2026-11-30T11:59:30Z","t2":"2026-11-30T12:00:30Z","preferred_until":"2026-11-30T12:01:30Z","expiry":"2026-11-30T12:02:30Z"}`,
		`"lease6":{"state":"lost","address":"2001:db8::11","duid":"0004aa","iaid":"01020304","acquired":"2026-11-30T11:58:30Z","lost":"2026-11-30T11:59:00Z","lost_why":"NoBinding at the renewal"}`} {
		if !strings.Contains(js, want) {
			t.Errorf("ls --json lacks %s:\n%s", want, js)
		}
	}
	if strings.Count(js, `"lease6"`) != 2 {
		t.Errorf("ls --json has a lease6 for an endpoint without one:\n%s", js)
	}

	var buf bytes.Buffer
	printListing(&buf, l)
	out := buf.String()
	for _, want := range []string{"LEASE  LEASE6", "bound  renewing", "-      lost", "DHCPV6 LEASE",
		"2001:db8::10  e1        00030001020000000001  0a0b0c0d  renewing  2026-11-30T11:59:30Z  2026-11-30T12:00:30Z  2026-11-30T12:02:30Z  -",
		"2001:db8::11  e2        0004aa                01020304  lost      never                 never                 never                 2026-11-30T11:59:00Z (NoBinding at the renewal)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Past its expiry, not yet marked (the daemon was down): lost since then.
	st.Endpoints[0].Lease6.Acquired = now.Add(-time.Hour)
	buf.Reset()
	printListing(&buf, listing(st, dockerView{}))
	if want := "lost   2026-11-30T11:01:00Z  2026-11-30T11:02:00Z  2026-11-30T11:04:00Z  2026-11-30T11:04:00Z (it expired while the daemon was not running)"; !strings.Contains(buf.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, buf.String())
	}
}
