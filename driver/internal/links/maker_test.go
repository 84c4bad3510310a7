package links

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store/record"
	"golang.org/x/sys/unix"
)

const (
	mark  = "underlay:instance-1"
	other = "underlay:instance-2"
)

func vlan(name, base string, id int) record.ParentLink {
	return record.ParentLink{Name: name, Kind: kernel.KindVLAN, Base: base, VLAN: id}
}

// kernelWith holds eth0 (MTU 1500) and what add adds.
func kernelWith(t *testing.T, add func(k *nltest.Kernel, eth0 int)) *nltest.Kernel {
	t.Helper()
	k := nltest.New()
	k.AddHostLink("eth0", "device", 1500)
	if add != nil {
		l, _ := k.Link("eth0")
		add(k, l.Index)
	}
	return k
}

func TestCreateMakes(t *testing.T) {
	k := kernelWith(t, nil)
	m := &Maker{Links: k, Mark: mark}
	if err := m.Create(context.Background(), record.ParentLink{Name: "eth0.10", Kind: kernel.KindVLAN, Base: "eth0", VLAN: 10, MTU: 1400}); err != nil {
		t.Fatalf("Create VLAN: %v", err)
	}
	l, ok := k.Link("eth0.10")
	if !ok {
		t.Fatalf("no eth0.10 after Create; links %v", k.Names())
	}
	if l.Kind != kernel.KindVLAN || l.VLAN != 10 || l.MTU != 1400 || l.Alias != mark || k.Parent("eth0.10") != "eth0" {
		t.Fatalf("eth0.10 = %+v on %q, want VLAN 10 on eth0, MTU 1400, mark %q", l, k.Parent("eth0.10"), mark)
	}

	name := "uli" + drivertest.NetA[:12]
	if err := m.Create(context.Background(), record.ParentLink{Name: name, Kind: kernel.KindDummy, MTU: 9000}); err != nil {
		t.Fatalf("Create dummy: %v", err)
	}
	if l, ok := k.Link(name); !ok || l.Kind != kernel.KindDummy || l.MTU != 9000 || l.Alias != mark {
		t.Fatalf("%s = %+v (exists %v), want a dummy, MTU 9000, mark %q", name, l, ok, mark)
	}
}

func TestCreateUnknownKind(t *testing.T) {
	k := kernelWith(t, nil)
	err := (&Maker{Links: k, Mark: mark}).Create(context.Background(), record.ParentLink{Name: "br9", Kind: "bridge"})
	drivertest.WantErr(t, err, nil, "br9", `unknown kind "bridge"`)
	if _, ok := k.Link("br9"); ok {
		t.Fatal("a link of an unknown kind was made")
	}
}

// TestCreateExisting: the kernel's EEXIST is success only for the link
// exactly as planned; otherwise a conflict naming the link, or the
// rename of an owned VLAN.
func TestCreateExisting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		add     func(k *nltest.Kernel, eth0 int)
		p       record.ParentLink
		ok      bool
		renamed string   // RenamedTo's answer
		want    []string // the conflict mentions
	}{
		{name: "the VLAN a previous attempt made", p: vlan("eth0.10", "eth0", 10), ok: true,
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "eth0.10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 10, MTU: 1500, Alias: mark})
			}},
		{name: "the dummy a previous attempt made", p: record.ParentLink{Name: "uli000000000001", Kind: kernel.KindDummy}, ok: true,
			add: func(k *nltest.Kernel, _ int) {
				k.AddLink(kernel.Link{Name: "uli000000000001", Kind: kernel.KindDummy, MTU: 1500, Alias: mark})
			}},
		{name: "the VLAN renamed by an operator", p: vlan("eth0.10", "eth0", 10), renamed: "lan10",
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "lan10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 10, MTU: 1500, Alias: mark})
			}},
		{name: "the VLAN ID under another name, someone else's", p: vlan("eth0.10", "eth0", 10),
			want: []string{"VLAN 10 on eth0", "as lan10", `mark ""`, "-o parent=lan10"},
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "lan10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 10, MTU: 1500})
			}},
		{name: "the VLAN ID under another name, another instance's", p: vlan("eth0.10", "eth0", 10),
			want: []string{"as lan10", fmt.Sprintf("mark %q", other)},
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "lan10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 10, MTU: 1500, Alias: other})
			}},
		{name: "the name, another instance's VLAN", p: vlan("eth0.10", "eth0", 10),
			want: []string{"vlan link eth0.10", "not the one planned"},
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddHostLink("eth1", "device", 1500)
				eth1, _ := k.Link("eth1")
				k.AddLink(kernel.Link{Name: "eth0.10", Kind: kernel.KindVLAN, ParentIndex: eth1.Index, VLAN: 10, MTU: 1500, Alias: other})
			}},
		{name: "the name, an owned VLAN of another ID", p: vlan("eth0.10", "eth0", 10),
			want: []string{"vlan link eth0.10", "not the one planned"},
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "eth0.10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 20, MTU: 1500, Alias: mark})
			}},
		{name: "the name, a user's device", p: vlan("eth0.10", "eth0", 10),
			want: []string{"eth0.10", "not the one planned", "remove it"},
			add:  func(k *nltest.Kernel, _ int) { k.AddHostLink("eth0.10", "device", 1500) }},
		{name: "the dummy's name, unmarked", p: record.ParentLink{Name: "uli000000000001", Kind: kernel.KindDummy},
			want: []string{"dummy link uli000000000001", "not the one planned"},
			add: func(k *nltest.Kernel, _ int) {
				k.AddLink(kernel.Link{Name: "uli000000000001", Kind: kernel.KindDummy, MTU: 1500})
			}},
		{name: "the dummy's name, a VLAN of ours", p: record.ParentLink{Name: "uli000000000001", Kind: kernel.KindDummy},
			want: []string{"dummy link uli000000000001", "not the one planned"},
			add: func(k *nltest.Kernel, eth0 int) {
				k.AddLink(kernel.Link{Name: "uli000000000001", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 5, MTU: 1500, Alias: mark})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kernelWith(t, tc.add)
			before := k.Names()
			err := (&Maker{Links: k, Mark: mark}).Create(context.Background(), tc.p)
			if !slices.Equal(k.Names(), before) {
				t.Fatalf("links %v after Create, were %v: nothing is made or removed", k.Names(), before)
			}
			to, renamed := RenamedTo(err)
			switch {
			case tc.ok:
				if err != nil {
					t.Fatalf("Create = %v, want success", err)
				}
			case tc.renamed != "":
				if !renamed || to != tc.renamed {
					t.Fatalf("Create = %v; RenamedTo = %q, %v; want %q", err, to, renamed, tc.renamed)
				}
				if errors.Is(err, pluginapi.ErrConflict) {
					t.Fatalf("Create = %v, a conflict; want the rename alone", err)
				}
				drivertest.WantErr(t, err, nil, "VLAN 10 on eth0", "created as eth0.10", "renamed to lan10")
			default:
				if renamed {
					t.Fatalf("Create = %v, a rename to %q; want a conflict", err, to)
				}
				drivertest.WantErr(t, err, pluginapi.ErrConflict, tc.want...)
			}
		})
	}
}

// eexist answers EEXIST for every VLAN, as the kernel does for an ID that
// a link moved to another namespace still holds on its base.
type eexist struct {
	*nltest.Kernel
	listErr error
}

func (e eexist) AddVLAN(ctx context.Context, name, base string, id, mtu int, mark string) error {
	return fmt.Errorf("create VLAN %s: %w", name, unix.EEXIST)
}

func (e eexist) List(ctx context.Context) ([]kernel.Link, error) {
	if e.listErr != nil {
		return nil, e.listErr
	}
	return e.Kernel.List(ctx)
}

func TestCreateEEXISTUnexplained(t *testing.T) {
	k := kernelWith(t, nil)
	err := (&Maker{Links: eexist{Kernel: k}, Mark: mark}).Create(context.Background(), vlan("eth0.10", "eth0", 10))
	drivertest.WantErr(t, err, pluginapi.ErrConflict, "VLAN 10 on eth0", "another network namespace", "ip -n NS link set")
	if !errors.Is(err, unix.EEXIST) {
		t.Fatalf("Create = %v, does not wrap the kernel's EEXIST", err)
	}
	if _, renamed := RenamedTo(err); renamed {
		t.Fatal("an unexplained EEXIST is taken for a rename")
	}
}

func TestCreateEEXISTListFails(t *testing.T) {
	k := kernelWith(t, nil)
	boom := errors.New("netlink: dump interrupted")
	err := (&Maker{Links: eexist{Kernel: k, listErr: boom}, Mark: mark}).Create(context.Background(), vlan("eth0.10", "eth0", 10))
	if !errors.Is(err, unix.EEXIST) || !errors.Is(err, boom) {
		t.Fatalf("Create = %v, want both the EEXIST and the listing's error", err)
	}
	if errors.Is(err, pluginapi.ErrConflict) {
		t.Fatalf("Create = %v: a conflict it could not tell", err)
	}
}

// TestCreateOtherErrors: anything but EEXIST is the kernel's answer as it
// is, never a conflict; the links are not listed.
func TestCreateOtherErrors(t *testing.T) {
	k := kernelWith(t, nil)
	m := &Maker{Links: k, Mark: mark}
	err := m.Create(context.Background(), vlan("eth9.10", "eth9", 10))
	if !errors.Is(err, netlinkutil.ErrNotFound) || errors.Is(err, pluginapi.ErrConflict) {
		t.Fatalf("Create on a missing base = %v, want the kernel's not-found, not a conflict", err)
	}
	err = m.Create(context.Background(), record.ParentLink{Name: "a-name-longer-than-15", Kind: kernel.KindDummy})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Create of a long name = %v, want EINVAL", err)
	}
	if n := k.Calls("list"); n != 0 {
		t.Fatalf("listed the links %d times for errors other than EEXIST", n)
	}
}

func TestRenamedTo(t *testing.T) {
	if _, ok := RenamedTo(nil); ok {
		t.Error("RenamedTo(nil) reports a rename")
	}
	if _, ok := RenamedTo(errors.New("VLAN 10 was renamed to x")); ok {
		t.Error("RenamedTo of another error reports a rename")
	}
	wrapped := fmt.Errorf("ensure parent: %w", errRenamed{vlan: 10, base: "eth0", from: "eth0.10", to: "lan10"})
	if to, ok := RenamedTo(wrapped); !ok || to != "lan10" {
		t.Errorf("RenamedTo(wrapped) = %q, %v; want lan10", to, ok)
	}
}

// routes answers a fixed route table, counting the calls.
type routes struct {
	rs    []kernel.Route
	err   error
	calls int
}

func (r *routes) Routes(context.Context) ([]kernel.Route, error) {
	r.calls++
	return r.rs, r.err
}

func withParent(parent string) record.Network {
	n := drivertest.Macvlan(drivertest.NetA, parent, "bridge", "192.0.2.0/24")
	n.Options = map[string]string{"parent": parent}
	return n
}

// TestResolve: the Resolver reads what the option needs (one lookup for
// an ordinary link, the whole list otherwise, the routes only for auto)
// and hands the reading to plan.ResolveParent.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n           record.Network
		noRoutes    bool
		want        string // the resolved name
		create      bool   // a parent link to create
		gets, lists int
		routeCalls  int
		err         []string
	}{
		{name: "an ordinary link: one lookup", n: withParent("eth0"), want: "eth0", gets: 1},
		{name: "an altname: one lookup, the kernel name", n: withParent("lan0"), want: "eth0", gets: 1},
		{name: "a VLAN to create: the list", n: withParent("eth0.20"), want: "eth0.20", create: true, gets: 1, lists: 1},
		{name: "a VLAN by another name: the one that exists", n: withParent("eth0.010"), want: "eth0.10", gets: 1, lists: 1},
		{name: "candidates: the list, the first that exists", n: withParent("eth7,eth0"), want: "eth0", lists: 1},
		{name: "an internal network: its dummy to create", n: record.Network{ID: drivertest.NetA, Type: "macvlan", Internal: true}, want: "uli" + drivertest.NetA[:12], create: true, gets: 1, lists: 1},
		{name: "an internal network whose dummy exists: one lookup", n: record.Network{ID: drivertest.NetB, Type: "macvlan", Internal: true}, want: "uli" + drivertest.NetB[:12], gets: 1},
		{name: "a macvlan link: the list, refused naming its lower link", n: withParent("mv0"), gets: 1, lists: 1, err: []string{"mv0", "eth0"}},
		{name: "missing", n: withParent("eth9"), gets: 1, lists: 1, err: []string{"eth9", "does not exist"}},
		{name: "auto: the routes", n: withParent("auto"), want: "eth0", lists: 1, routeCalls: 1},
		{name: "auto without routes: refused", n: withParent("auto"), noRoutes: true, lists: 1, err: []string{"parent=auto", "-o parent=IFACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kernelWith(t, func(k *nltest.Kernel, eth0 int) {
				k.AddAltName("eth0", "lan0")
				k.AddLink(kernel.Link{Name: "eth0.10", Kind: kernel.KindVLAN, ParentIndex: eth0, VLAN: 10, MTU: 1500})
				k.AddLink(kernel.Link{Name: "mv0", Kind: kernel.KindMacvlan, ParentIndex: eth0, MTU: 1500})
				k.AddLink(kernel.Link{Name: "uli" + drivertest.NetB[:12], Kind: kernel.KindDummy, MTU: 1500, Alias: mark})
			})
			eth0, _ := k.Link("eth0")
			rt := &routes{rs: []kernel.Route{{Dst: mustPrefix("192.0.2.0/24"), LinkIndex: eth0.Index, Table: kernel.MainTable}}}
			r := &Resolver{Links: k, Routes: rt}
			if tc.noRoutes {
				r.Routes = nil
			}
			res, err := r.Resolve(context.Background(), tc.n)
			if tc.err != nil {
				drivertest.WantErr(t, err, nil, tc.err...)
			} else if err != nil {
				t.Fatalf("Resolve = %v", err)
			} else if res.Name != tc.want || (res.Create != nil) != tc.create {
				t.Fatalf("Resolve = %+v, want %s (create: %v)", res, tc.want, tc.create)
			}
			if g, l := k.Calls("get"), k.Calls("list"); g != tc.gets || l != tc.lists || rt.calls != tc.routeCalls {
				t.Fatalf("read %d gets, %d lists, %d route dumps; want %d, %d, %d", g, l, rt.calls, tc.gets, tc.lists, tc.routeCalls)
			}
		})
	}
}

func TestResolveReadErrors(t *testing.T) {
	boom := errors.New("netlink: no buffer space")
	for _, tc := range []struct {
		name  string
		n     record.Network
		fault string // the operation that fails
		rErr  error
	}{
		{name: "lookup", n: withParent("eth0"), fault: "get"},
		{name: "list", n: withParent("eth0,eth1"), fault: "list"},
		{name: "routes", n: withParent("auto"), rErr: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kernelWith(t, nil)
			k.SetFault(func(op, _ string) error {
				if op == tc.fault {
					return boom
				}
				return nil
			})
			_, err := (&Resolver{Links: k, Routes: &routes{err: tc.rErr}}).Resolve(context.Background(), tc.n)
			if !errors.Is(err, boom) {
				t.Fatalf("Resolve = %v, want the read's error", err)
			}
		})
	}
}

func TestResolveBadOption(t *testing.T) {
	k := kernelWith(t, nil)
	_, err := (&Resolver{Links: k}).Resolve(context.Background(), withParent("eth0,"))
	if err == nil {
		t.Fatal("Resolve of parent=eth0, = nil, want the option refused")
	}
	if k.Calls("get")+k.Calls("list") != 0 {
		t.Fatal("the kernel was read for an option that does not parse")
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
