package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
	"golang.org/x/sys/unix"
)

func TestRule1SameIDSameConfigIsReused(t *testing.T) {
	f := newFixture(t)
	r := netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}}
	f.mustCreate(r)
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	for i := 0; i < 3; i++ {
		if err := f.create(r); err != nil {
			t.Fatalf("same-ID re-create %d answered %v, want {}", i, err)
		}
	}
	f.wantNetworks(netA)
	f.wantLinks("eth0.10", link)
	if f.k.Calls("vlan") != 1 {
		t.Fatalf("VLAN created %d times, want once", f.k.Calls("vlan"))
	}

	// The VLAN vanished (a reboot, an administrator): the re-create brings it back.
	f.k.Remove("eth0.10")
	if err := f.create(r); err != nil {
		t.Fatal(err)
	}
	f.wantLinks("eth0.10")
	if l, _ := f.k.Link("eth0.10"); l.VLAN != 10 || f.k.Parent("eth0.10") != "eth0" {
		t.Fatalf("re-created VLAN link %+v on %s, want VLAN 10 on eth0", l, f.k.Parent("eth0.10"))
	}
	f.wantNetworks(netA)
}

func TestRule1InternalDummyReCreated(t *testing.T) {
	f := newFixture(t)
	r := netReq{ID: netA}
	f.mustCreate(r)
	f.wantLinks("uliaaaaaaaaaaaa")
	f.mustCreate(r)
	f.wantLinks("uliaaaaaaaaaaaa")
	f.k.Remove("uliaaaaaaaaaaaa")
	f.mustCreate(r)
	f.wantLinks("uliaaaaaaaaaaaa")
	if f.k.Calls("dummy") != 2 {
		t.Fatalf("dummy created %d times, want 2 (create, re-create after it vanished)", f.k.Calls("dummy"))
	}
	if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	f.wantLinks()
	f.wantNetworks()
}

func TestRule2StaleDuplicateReplaced(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.wantLinks("eth0.10", link)

	// Same ID, another parent and MTU: the old copy is stale.
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth1", "mtu": "9000"}, V4: []string{"198.18.5.0/24"}})
	f.wantNetworks(netA)
	f.wantLinks() // old endpoint link and the VLAN underlay created are gone
	n, _ := f.record(netA)
	if n.Parent != "eth1" || n.MTU != 9000 || n.IPv4[0].Subnet != "198.18.5.0/24" || n.Pending != nil {
		t.Fatalf("record after replace: %+v", n)
	}
	var eps []record.Endpoint
	_ = f.db.View(func(tx *store.Tx) (err error) { eps, err = tx.Endpoints(netA); return err })
	if len(eps) != 0 {
		t.Fatalf("endpoints of the stale copy survived: %+v", eps)
	}
}

func TestRule2KeepsParentOtherNetworksUse(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.2.0/24"}})
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth1"}})
	f.wantLinks("eth0.10")
	f.wantNetworks(netA, netB)
}

func TestRule3Conflicts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		holder    map[string]string
		holderNet []string
		want      map[string]string
		wantNet   []string
		reason    string
	}{
		{"overlap", map[string]string{"parent": "eth0"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0"}, []string{"198.18.1.0/25"}, "overlaps"},
		{"passthru holder", map[string]string{"parent": "eth0", "macvlan_mode": "passthru"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0"}, []string{"198.18.2.0/24"}, "passthru"},
		{"passthru wanted", map[string]string{"parent": "eth0"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0", "macvlan_mode": "passthru"}, []string{"198.18.2.0/24"}, "exclusively"},
		{"macvlan on ipvlan", map[string]string{"parent": "eth0", "type": "ipvlan"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0"}, []string{"198.18.2.0/24"}, "EBUSY"},
		{"ipvlan on macvlan", map[string]string{"parent": "eth0"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0", "type": "ipvlan"}, []string{"198.18.2.0/24"}, "EBUSY"},
		{"ipvlan modes", map[string]string{"parent": "eth0", "ipvlan_mode": "l3"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0", "ipvlan_mode": "l2"}, []string{"198.18.2.0/24"}, "ipvlan_mode=l3"},
		{"VLAN parent overlap", map[string]string{"parent": "eth0.20"}, []string{"198.18.1.0/24"}, map[string]string{"parent": "eth0.20"}, []string{"198.18.1.0/24"}, "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.mustCreate(netReq{ID: netA, Opts: tc.holder, V4: tc.holderNet})
			link := f.mustEndpoint(netA, epA, "")
			f.docker.setLive(netA)
			before := f.k.Calls("endpoint")
			err := f.create(netReq{ID: netB, Opts: tc.want, V4: tc.wantNet})
			parent := tc.holder["parent"]
			wantErr(t, err, pluginapi.ErrConflict, "aaaaaaaaaaaa", parent, tc.reason, "docker network rm aaaaaaaaaaaa")
			f.wantNetworks(netA)
			links := []string{link}
			if parent == "eth0.20" {
				links = append(links, "eth0.20")
			}
			f.wantLinks(links...)
			if f.k.Calls("endpoint") != before {
				t.Fatal("the kernel was asked to create a link for a refused network")
			}
		})
	}
}

func TestRule3Coexist(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", "ipvlan_mode": "l3"}, V4: []string{"198.18.1.0/24"}, V6: []string{"2001:db8:1::/64"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0", "ipvlan_mode": "l3"}, V4: []string{"198.18.2.0/24"}, V6: []string{"2001:db8:2::/64"}})
	a := f.mustEndpoint(netA, epA, "198.18.1.2/24")
	b := f.mustEndpoint(netB, epB, "198.18.2.2/24")
	for _, name := range []string{a, b} {
		if l, _ := f.k.Link(name); l.Kind != "ipvlan" || l.Mode != "l3" || f.k.Parent(name) != "eth0" {
			t.Fatalf("link %s = %+v on %s", name, l, f.k.Parent(name))
		}
	}
	if f.docker.calls != 0 {
		t.Fatal("Docker was asked about holders although nothing conflicted")
	}
}

func TestRule4StaleHolderRemoved(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.30", "macvlan_mode": "passthru"}})
	link := f.mustEndpoint(netA, epA, "198.18.1.10/24")
	f.wantLinks("eth0.30", link)
	f.docker.setLive() // Docker answers 404 for netA: removed while underlay was down
	f.clock.Advance(time.Minute)

	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.30"}})
	f.wantNetworks(netB)
	f.wantLinks("eth0.30")
	if f.docker.calls != 1 {
		t.Fatalf("Docker asked %d times, want once", f.docker.calls)
	}
}

func TestRule4LiveOrUnknownHolderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fakeDocker)
	}{
		{"holder exists", func(d *fakeDocker) { d.setLive(netA) }},
		{"docker unreachable", func(d *fakeDocker) { d.err = errors.New("dial unix /var/run/docker.sock: connect: no such file") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
			tc.set(f.docker)
			wantErr(t, f.create(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}}), pluginapi.ErrConflict, "aaaaaaaaaaaa")
			f.wantNetworks(netA)
		})
	}
}

func TestRule4OnlyAllStaleHoldersAreRemoved(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/25"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.128/25"}})
	f.docker.setLive(netB) // netA stale, netB live
	wantErr(t, f.create(netReq{ID: netC, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24"}}), pluginapi.ErrConflict, "bbbbbbbbbbbb")
	f.wantNetworks(netA, netB) // a refusal changes nothing
}

func TestRule5ConcurrentConflictingCreatesOneWinner(t *testing.T) {
	f := newFixture(t)
	f.docker.setLive(func() []string {
		var ids []string
		for i := 0; i < 64; i++ {
			ids = append(ids, fmt.Sprintf("net%02d", i))
		}
		return ids
	}()...)
	var wg sync.WaitGroup
	var wins, conflicts atomic.Int32
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := f.create(netReq{ID: fmt.Sprintf("net%02d", i), Opts: map[string]string{"parent": "eth0.40", "macvlan_mode": "passthru"}, V4: []string{fmt.Sprintf("198.18.%d.0/24", i)}})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, pluginapi.ErrConflict):
				conflicts.Add(1)
			default:
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	if wins.Load() != 1 || conflicts.Load() != 63 {
		t.Fatalf("%d winners and %d conflicts, want 1 and 63", wins.Load(), conflicts.Load())
	}
	if got := f.networks(); len(got) != 1 {
		t.Fatalf("stored networks %v, want one", got)
	}
	f.wantLinks("eth0.40")
}

func TestRule5SameIDConcurrently(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.50"}})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("same-ID create answered %v, want {}", err)
		}
	}
	f.wantNetworks(netA)
	f.wantLinks("eth0.50")
}

func TestRule5ExpiredReservationRolledBack(t *testing.T) {
	f := newFixture(t)
	entered, release := make(chan struct{}), make(chan struct{})
	f.k.SetFault(func(op, name string) error {
		if op == "vlan" {
			close(entered)
			<-release // a kernel call that hangs
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.60"}}) }()
	<-entered
	if n, ok := f.record(netA); !ok || n.Pending == nil {
		t.Fatalf("no pending reservation while the kernel call hangs: %+v %v", n, ok)
	}
	f.d.reconcile.JanitorTick(context.Background()) // not yet expired
	if _, ok := f.record(netA); !ok {
		t.Fatal("reservation rolled back before its deadline")
	}
	f.clock.Advance(61 * time.Second)
	f.d.reconcile.JanitorTick(context.Background())
	f.wantNetworks()
	close(release)
	err := <-done
	wantErr(t, err, nil, "expired")
	f.wantNetworks()
	f.wantLinks() // the VLAN made after the rollback is cleaned by the request
}

func TestRule6FailedCreateLeavesNothing(t *testing.T) {
	for _, op := range []string{"vlan", "dummy"} {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t)
			f.k.SetFault(func(o, name string) error {
				if o == op {
					return fmt.Errorf("injected: %w", unix.ENOMEM)
				}
				return nil
			})
			r := netReq{ID: netA, Opts: map[string]string{"parent": "eth0.70"}}
			if op == "dummy" {
				r.Opts = nil
			}
			wantErr(t, f.create(r), nil, "injected")
			f.wantNetworks()
			f.wantLinks()
			var parents []record.ParentLink
			_ = f.db.View(func(tx *store.Tx) (err error) { parents, err = tx.ParentLinks(); return err })
			if len(parents) != 0 {
				t.Fatalf("parent link records left: %+v", parents)
			}
		})
	}
}

func TestCreateValidatesAgainstKernel(t *testing.T) {
	f := newFixture(t)
	f.k.AddHostLink("docker0", "bridge", 1500)
	f.k.AddHostLink("br-0123456789ab", "bridge", 1500)
	f.k.AddHostLink("br0", "bridge", 1500)
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.9.0/24"}})
	ep := f.mustEndpoint(netC, epA, "")
	f.mustCreate(netReq{ID: "dddddddddddd", V4: []string{"198.18.8.0/24"}})
	for _, tc := range []struct {
		opts map[string]string
		want []string
	}{
		{map[string]string{"parent": "eth7"}, []string{"eth7", "does not exist"}},
		{map[string]string{"parent": "eth7.10"}, []string{"eth7", "does not exist"}},
		{map[string]string{"parent": "eth0.0"}, []string{"VLAN 0", "1-4094"}},
		{map[string]string{"parent": "eth0.4095"}, []string{"VLAN 4095", "1-4094"}},
		{map[string]string{"parent": "lo.5"}, []string{"loopback"}},
		{map[string]string{"parent": "docker0"}, []string{"docker0", "Docker manages"}},
		{map[string]string{"parent": "br-0123456789ab"}, []string{"br-0123456789ab", "Docker manages"}},
		{map[string]string{"parent": ep}, []string{ep, "endpoint link"}},
		{map[string]string{"parent": "ulidddddddddddd"}, []string{"ulidddddddddddd", "another internal network"}},
		{map[string]string{"parent": "eth0", "mtu": "9000"}, []string{"mtu 9000", "1500", "eth0"}},
		{map[string]string{"parent": "eth0.80", "mtu": "1501"}, []string{"mtu 1501", "1500"}},
	} {
		wantErr(t, f.create(netReq{ID: netA, Opts: tc.opts}), pluginapi.ErrInvalid, tc.want...)
	}
	f.wantNetworks(netC, "dddddddddddd")
	f.wantLinks(ep, "ulidddddddddddd", "docker0", "br-0123456789ab", "br0")
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "br0", "mtu": "1500"}}) // a user's bridge is fine
}

func TestVLANSharedAndOwnership(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.10"}, V4: []string{"198.18.2.0/24"}})
	del := func(id string) {
		t.Helper()
		if err := f.d.DeleteNetwork(context.Background(), &network.DeleteNetworkRequest{NetworkID: id}); err != nil {
			t.Fatal(err)
		}
	}
	del(netA)
	f.wantLinks("eth0.10") // still used by netB
	del(netB)
	f.wantLinks() // underlay created it: deleted with the last network

	// A VLAN link the administrator made is used as it is and never deleted.
	if err := f.k.AddVLAN(context.Background(), "eth0.11", "eth0", 11, 0, ""); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth0.11"}})
	del(netC)
	f.wantLinks("eth0.11")
}

func TestDeleteUnknownIsNotAnError(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
}

func TestAllocateNetworkAnswersValidatedOptions(t *testing.T) {
	f := newFixture(t)
	resp, err := config.AllocateNetwork(&network.AllocateNetworkRequest{NetworkID: netA, Options: map[string]string{"parent": "eth0", "ipvlan_mode": "l3"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Options["parent"] != "eth0" || resp.Options["ipvlan_mode"] != "l3" || len(resp.Options) != 2 {
		t.Fatalf("AllocateNetwork answered %v", resp.Options)
	}
	_, err = config.AllocateNetwork(&network.AllocateNetworkRequest{NetworkID: netA, Options: map[string]string{"parnet": "eth0"}})
	wantErr(t, err, pluginapi.ErrInvalid, "parnet")
	if caps := f.d.GetCapabilities(context.Background()); caps.Scope != "local" || caps.ConnectivityScope != "global" {
		t.Fatalf("capabilities %+v", caps)
	}
}

func TestVLANOnVLANKeepsItsBase(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	del := func(id string) {
		t.Helper()
		if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: id}); err != nil {
			t.Fatal(err)
		}
	}
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth0.10.20"}, V4: []string{"198.18.2.0/24"}})
	link := f.mustEndpoint(netB, epB, "198.18.2.10/24")
	del(netA)
	f.wantLinks("eth0.10", "eth0.10.20", link) // eth0.10 carries netB's VLAN

	// A reboot: both VLANs vanish; the restart re-creates the base first.
	f.k.Remove("eth0.10")
	f.restart()
	f.wantLinks("eth0.10", "eth0.10.20")
	if f.k.Parent("eth0.10.20") != "eth0.10" {
		t.Fatalf("eth0.10.20 re-created on %s", f.k.Parent("eth0.10.20"))
	}
	del(netB)
	f.wantLinks() // the last user went: both VLANs underlay created go
}

func TestOwnedVLANKeptWhileForeignLinksStandOnIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
	if err := f.k.AddVLAN(ctx, "admin.5", "eth0.10", 5, 0, ""); err != nil { // the administrator's
		t.Fatal(err)
	}
	if err := f.d.DeleteNetwork(ctx, &network.DeleteNetworkRequest{NetworkID: netA}); err != nil {
		t.Fatal(err)
	}
	f.wantLinks("eth0.10", "admin.5")
}

// A link someone else makes under the planned name between the decision and
// the kernel call is refused, never adopted, and the rollback leaves it.
func TestForeignLinkUnderThePlannedNameIsNeverAdoptedOrDeleted(t *testing.T) {
	for _, foreign := range []kernel.Link{
		{Name: "eth0.10", Kind: "dummy", MTU: 1500},                          // another kind
		{Name: "eth0.10", Kind: "vlan", VLAN: 10, ParentIndex: 2, MTU: 1500}, // a user's identical VLAN, unmarked
	} {
		f := newFixture(t)
		f.k.SetFault(func(op, name string) error {
			if op == "vlan" && name == "eth0.10" {
				f.k.AddLink(foreign)
			}
			return nil
		})
		err := f.create(netReq{ID: netA, Opts: map[string]string{"parent": "eth0.10"}})
		if err == nil || !strings.Contains(err.Error(), "eth0.10") {
			t.Fatalf("create over a foreign %s: %v, want a refusal naming eth0.10", foreign.Kind, err)
		}
		f.k.SetFault(nil)
		f.wantNetworks()
		f.wantLinks("eth0.10")
		var parents []record.ParentLink
		_ = f.db.View(func(tx *store.Tx) (err error) { parents, err = tx.ParentLinks(); return err })
		if len(parents) != 0 {
			t.Fatalf("the foreign %s link is recorded as underlay's: %+v", foreign.Kind, parents)
		}
		f.restart()
		f.wantLinks("eth0.10")
	}
}
