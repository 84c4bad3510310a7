package lancheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// fakeKernel holds links by name and routes by link index.
type fakeKernel struct {
	links  map[string]kernel.Link
	routes map[int][]kernel.Route
}

func (k fakeKernel) Get(_ context.Context, name string) (kernel.Link, error) {
	if l, ok := k.links[name]; ok {
		return l, nil
	}
	return kernel.Link{}, fmt.Errorf("%w: %s", netlinkutil.ErrNotFound, name)
}

func (k fakeKernel) LinkByIndex(_ context.Context, idx int) (kernel.Link, error) {
	for _, l := range k.links {
		if l.Index == idx {
			return l, nil
		}
	}
	return kernel.Link{}, netlinkutil.ErrNotFound
}

func (k fakeKernel) RoutesVia(_ context.Context, idx int) ([]kernel.Route, error) {
	return k.routes[idx], nil
}

func (k fakeKernel) AddThrowaway(context.Context, string, net.HardwareAddr, string) (*netlinkutil.Throwaway, error) {
	return nil, errors.New("the fake wire makes its own")
}

// fakeWire answers from fixed results and records what was asked.
type fakeWire struct {
	mu       sync.Mutex
	offers   []dhcp.Offer
	routers  []Router
	answers  map[netip.Addr]bool // target -> answers the parent
	childOK  bool
	asked    []string
	collects time.Duration
}

func (w *fakeWire) note(s string) { w.mu.Lock(); w.asked = append(w.asked, s); w.mu.Unlock() }

func (w *fakeWire) Offers(ctx context.Context, parent string, mac net.HardwareAddr, clientID bool) ([]dhcp.Offer, error) {
	w.note(fmt.Sprintf("offers %s %s clientID=%t", parent, mac, clientID))
	<-ctx.Done() // a collector listens until its end
	return w.offers, nil
}

func (w *fakeWire) Routers(ctx context.Context, parent string, mac net.HardwareAddr) ([]Router, error) {
	<-ctx.Done()
	return w.routers, nil
}

func (w *fakeWire) Advertises(ctx context.Context, parent string, mac net.HardwareAddr) ([]dhcp6.Advertisement, error) {
	<-ctx.Done()
	return nil, nil
}

func (w *fakeWire) Probe4(_ context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach {
	w.note("probe4 " + parent + " " + mac.String() + " " + target.String())
	return Reach{Target: target, From: "the parent", Answered: w.answers[target], AnswerMAC: gwMAC}
}

func (w *fakeWire) Probe6(_ context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach {
	w.note("probe6 " + target.String())
	return Reach{Target: target, From: "the parent", Answered: w.answers[target]}
}

func (w *fakeWire) ChildProbe4(_ context.Context, parent string, mac net.HardwareAddr, target netip.Addr) (Reach, error) {
	w.note("child " + target.String())
	return Reach{Target: target, From: mac.String(), Answered: w.childOK && w.answers[target]}, nil
}

func (w *fakeWire) saw(prefix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.asked {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

var eth0 = kernel.Link{Name: "eth0", Index: 2, Kind: "device", MTU: 1500, MAC: "02:00:00:00:00:aa", Encap: "ether"}

// A budget too short to listen is no evidence: DHCP, RA and DHCPv6 are
// unknown, not problems, and nothing is asked.
func TestObserveShortBudget(t *testing.T) {
	t.Parallel()
	k := fakeKernel{links: map[string]kernel.Link{"eth0": eth0}}
	w := &fakeWire{offers: []dhcp.Offer{offer1}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	n := Network{Parent: "eth0", Type: "macvlan", DHCP: true, IPv6Mode: "slaac"}
	items := Judge(n, Observe(ctx, Env{Kernel: k, wire: w}, n))
	for _, c := range []Check{DHCP, IPv6RA, DHCPv6} {
		if it := item(t, items, c, ""); it.Verdict != Unknown || !strings.Contains(it.Evidence, "less than 1s") {
			t.Errorf("%s: %+v", c, it)
		}
	}
	if len(w.saw("offers")) != 0 {
		t.Errorf("asked with no time to listen: %v", w.asked)
	}
}

func observe(t *testing.T, k fakeKernel, w *fakeWire, n Network) Observations {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), askAfter+minListen+300*time.Millisecond)
	defer cancel()
	return Observe(ctx, Env{Kernel: k, wire: w}, n)
}

// With no gateway known, the router of a DHCP offer is asked once the
// collectors are done, from the parent and from a child.
func TestObserveAsksTheOffersRouter(t *testing.T) {
	t.Parallel()
	k := fakeKernel{links: map[string]kernel.Link{"eth0": eth0}}
	w := &fakeWire{offers: []dhcp.Offer{offer1}, answers: map[netip.Addr]bool{gw: true}}
	o := observe(t, k, w, Network{Parent: "eth0", Type: "macvlan"})
	if !o.Parent4.Answered || o.Child4.Answered || o.Parent4.Target != gw {
		t.Fatalf("parent %+v child %+v", o.Parent4, o.Child4)
	}
	if len(w.saw("child "+gw.String())) != 1 {
		t.Fatalf("the child asked %v", w.asked)
	}
	if it := item(t, Judge(Network{Parent: "eth0", Type: "macvlan"}, o), NewMAC, ""); it.Verdict != Problem {
		t.Fatalf("new-mac %+v", it)
	}
	// One DISCOVER from a new locally administered MAC, one from eth0's
	// own with a client ID; the child asks before the parent.
	if got := w.saw("offers eth0 02:00:00:00:00:aa clientID=true"); len(got) != 1 || len(w.saw("offers")) != 2 {
		t.Fatalf("macvlan's DISCOVERs: %v", w.asked)
	}
	if probes := append(w.saw("child"), w.saw("probe4")...); len(probes) != 2 || !strings.HasPrefix(w.asked[len(w.asked)-2], "child") {
		t.Fatalf("probes %v (the child first, then the parent, never at once)", w.asked)
	}
}

// The host's default route through the parent is asked at once; ipvlan
// makes no child and asks DHCP with the parent's MAC.
func TestObserveIPvlanAndHostRoute(t *testing.T) {
	t.Parallel()
	k := fakeKernel{links: map[string]kernel.Link{"eth0": eth0}, routes: map[int][]kernel.Route{2: {
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: gw, LinkIndex: 2, Table: kernel.MainTable, Priority: 100},
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("198.18.5.9"), LinkIndex: 2, Table: kernel.MainTable, Priority: 200},
	}}}
	w := &fakeWire{answers: map[netip.Addr]bool{gw: true}}
	o := observe(t, k, w, Network{Parent: "eth0", Type: "ipvlan", Mode: "l2"})
	if o.Parent4.Target != gw || !o.Parent4.Answered || o.Parent4From == "" {
		t.Fatalf("parent %+v from %q", o.Parent4, o.Parent4From)
	}
	if c := w.saw("child"); len(c) != 0 {
		t.Fatalf("ipvlan made a child: %v", c)
	}
	if got := w.saw("offers eth0 02:00:00:00:00:aa clientID=true"); len(got) != 1 {
		t.Fatalf("ipvlan's DISCOVER: %v", w.asked)
	}
}

// A missing or down parent sends nothing.
func TestObserveUnusableParent(t *testing.T) {
	t.Parallel()
	down := eth0
	down.Down = true
	for name, k := range map[string]fakeKernel{
		"missing": {links: map[string]kernel.Link{}},
		"down":    {links: map[string]kernel.Link{"eth0": down}},
	} {
		t.Run(name, func(t *testing.T) {
			w := &fakeWire{}
			n := Network{Parent: "eth0", Type: "macvlan", DHCP: true, Gateway4: gw}
			o := observe(t, k, w, n)
			if len(w.asked) != 0 {
				t.Fatalf("sent on an unusable parent: %v", w.asked)
			}
			items := Judge(n, o)
			if it := item(t, items, Parent, ""); it.Verdict != Problem {
				t.Fatalf("parent %+v", it)
			}
			for _, c := range []Check{NewMAC, DHCP, IPv6RA, DHCPv6} {
				if it := item(t, items, c, ""); it.Verdict != Unknown {
					t.Errorf("%s: %+v", c, it)
				}
			}
			if it := item(t, items, Gateway, "ipv4"); it.Verdict != Unknown {
				t.Errorf("gateway %+v", it)
			}
		})
	}
}

func TestRefuse(t *testing.T) {
	wifi := kernel.Link{Name: "wlan0", Kind: "device", Wireless: true}
	err := Refuse(Network{Parent: "wlan0", Type: "macvlan"}, wifi)
	if err == nil || !strings.Contains(err.Error(), "wlan0") || !strings.Contains(err.Error(), "type=ipvlan") || !strings.Contains(err.Error(), "allow_wireless=true") {
		t.Fatalf("refusal %v", err)
	}
	for _, n := range []Network{{Parent: "wlan0", Type: "ipvlan"}, {Parent: "wlan0", Type: "macvlan", AllowWireless: true}} {
		if err := Refuse(n, wifi); err != nil {
			t.Errorf("%+v refused: %v", n, err)
		}
	}
	if err := Refuse(Network{Parent: "eth0", Type: "macvlan"}, eth0); err != nil {
		t.Errorf("wired refused: %v", err)
	}
}

// Passthru allows one child on the parent: the new MAC's probe goes out
// from the parent's socket and no child is made.
func TestObservePassthruMakesNoChild(t *testing.T) {
	t.Parallel()
	k := fakeKernel{links: map[string]kernel.Link{"eth0": eth0}}
	w := &fakeWire{answers: map[netip.Addr]bool{gw: true}}
	o := observe(t, k, w, Network{Parent: "eth0", Type: "macvlan", Mode: "passthru", Gateway4: gw})
	if c := w.saw("child"); len(c) != 0 {
		t.Fatalf("passthru made a child: %v", c)
	}
	if probes := w.saw("probe4 eth0"); len(probes) != 2 || strings.Contains(probes[0], "02:00:00:00:00:aa") {
		t.Fatalf("probes %v: want the new MAC's, then the parent's", probes)
	}
	if !o.Child4.Answered || !strings.Contains(o.Child4.From, "passthru") {
		t.Fatalf("child %+v", o.Child4)
	}
}
