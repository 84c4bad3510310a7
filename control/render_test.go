package control

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/ipam"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

func TestListing(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := State{Version: "v1", Inventory: doctor.Inventory{Now: now, Boot: "b2",
		Networks: []store.Network{
			{ID: "bbbbbbbbbbbb1", Type: "ipvlan", Mode: "l2", Flag: "bridge", Parent: "eth0.10", Options: map[string]string{"parent": "auto.10"},
				IPv4: []store.Pool{{Subnet: "198.18.2.0/24"}}, Pending: &store.Reservation{Deadline: now.Add(time.Minute)}},
			{ID: "aaaaaaaaaaaa1", Type: "macvlan", Mode: "bridge", Parent: "eth0", Options: map[string]string{"parent": "eth0"}, MTU: 1400,
				IPv4: []store.Pool{{Subnet: "198.18.1.0/24"}}, IPv6: []store.Pool{{Subnet: "2001:db8:1::/64"}}, Created: now},
		},
		Endpoints: []store.Endpoint{
			{NetworkID: "aaaaaaaaaaaa1", ID: "e1", Link: "ule1", MAC: "02:00:00:00:00:01", IPv4: "198.18.1.10/24", Sandbox: "/x", Boot: "b2"},
			{NetworkID: "aaaaaaaaaaaa1", ID: "e2", Link: "ule2", Sandbox: "/y", Boot: "b1",
				Lease: &store.Lease{Addr: "198.18.1.11/24", Expiry: now.Add(time.Hour), Lost: now.Add(-time.Minute)}},
		},
		Owned: []store.ParentLink{{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10}},
		Links: []netlinkutil.Link{{Name: "eth0"}},
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
	if a.Endpoints[0].Lease != "" || a.Endpoints[1].Lease != store.LeaseLost {
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
