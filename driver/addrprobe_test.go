package driver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/probe"
)

// fakeProber answers for the addresses in holders (address -> MAC).
type fakeProber struct {
	mu      sync.Mutex
	holders map[netip.Addr]string
	probed  []string // "parent addr mac budget"
}

func (p *fakeProber) Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed = append(p.probed, parent+" "+addr.String()+" "+mac.String()+" "+budget.String())
	if m, ok := p.holders[addr]; ok {
		hw, _ := net.ParseMAC(m)
		return &probe.ConflictError{Addr: addr, MAC: hw, Parent: parent, Seen: "an ARP reply"}
	}
	return nil
}

func (p *fakeProber) ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	return p.Probe(ctx, parent, mac, addr, budget)
}

const (
	epE = "eeeeeeeeeeee0000000000000000000000000000000000000000000000000005"
	epF = "ffffffffffff0000000000000000000000000000000000000000000000000006"
)

// Offers that are not free are declined and others asked for: one another
// endpoint of this daemon holds (a server offering everyone the same
// address), one a LAN host answers the probe for; after maxDeclines the
// create is refused naming each offer and why.
func TestDHCPDeclinesOffersThatAreNotFree(t *testing.T) {
	f, fl := dhcpFixture(t)
	pr := &fakeProber{holders: map[netip.Addr]string{netip.MustParseAddr("198.18.180.101"): "02:99:00:00:00:01"}}
	f.d.lan.Prober = pr
	ctx := context.Background()
	if err := f.d.CreateNetwork(ctx, dhcpNet(netA)); err != nil {
		t.Fatal(err)
	}
	r, err := f.endpoint(netA, epA, "", "")
	if err != nil || r.Interface == nil || r.Interface.Address != "198.18.180.100/24" {
		t.Fatalf("first endpoint: %+v, %v", r, err)
	}
	if len(pr.probed) != 1 || !strings.Contains(pr.probed[0], "lan0 198.18.180.100 ") || !strings.HasSuffix(pr.probed[0], " 300ms") {
		t.Fatalf("probes %q: want one of the offer on lan0 from the endpoint's MAC within the default 300ms", pr.probed)
	}
	// The next free address, .101, is answered for on the LAN: declined,
	// .102 taken.
	r, err = f.endpoint(netA, epB, "", "")
	if err != nil || r.Interface == nil || r.Interface.Address != "198.18.180.102/24" {
		t.Fatalf("second endpoint: %+v, %v (want .101 declined, .102)", r, err)
	}
	if strings.Join(fl.declined, ",") != "198.18.180.101/24" {
		t.Fatalf("declined %v, want .101 (a LAN host answered for it)", fl.declined)
	}
	// A rogue server that offers everyone .100, which epA holds.
	fl.mu.Lock()
	fl.same, fl.declined = "198.18.180.100/24", nil
	fl.mu.Unlock()
	_, err = f.endpoint(netA, epC, "", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.180.100", "endpoint "+dockerid.Short(epA), "declined")
	if len(fl.declined) != plan.MaxDeclines {
		t.Fatalf("declined %v, want %d DECLINEs", fl.declined, plan.MaxDeclines)
	}
	// Concurrent creates offered one address: exactly one takes it.
	fl.mu.Lock()
	fl.same, fl.declined = "198.18.180.120/24", nil
	fl.mu.Unlock()
	errs := make(chan error, 2)
	for _, ep := range []string{epE, epF} {
		go func() { _, err := f.endpoint(netA, ep, "", ""); errs <- err }()
	}
	var ok int
	for range 2 {
		if err := <-errs; err == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("%d of two concurrent creates offered the same address took it, want 1", ok)
	}
}

// A static address a LAN host answers for is refused, naming the MAC and
// the fix; address_probe=0 switches the probe off.
func TestStaticAddressProbe(t *testing.T) {
	f := newFixture(t)
	pr := &fakeProber{holders: map[netip.Addr]string{netip.MustParseAddr("198.18.1.10"): "02:99:00:00:00:01"}}
	f.d.lan.Prober = pr
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", probeopt.Name: "200ms"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	_, err := f.endpoint(netA, epA, "198.18.1.10/24", "")
	wantErr(t, err, pluginapi.ErrConflict, "198.18.1.10", "02:99:00:00:00:01", "another --ip", "--aux-address", "--ip-range", "address_probe=0")
	if _, err := f.endpoint(netA, epB, "198.18.1.11/24", ""); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(pr.probed[len(pr.probed)-1], " 200ms") {
		t.Fatalf("probes %q: want the network's 200ms", pr.probed)
	}
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1", probeopt.Name: "0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	n := len(pr.probed)
	if _, err := f.endpoint(netB, epC, "198.18.1.10/24", ""); err != nil || len(pr.probed) != n {
		t.Fatalf("address_probe=0: %v, probes %q", err, pr.probed[n:])
	}
	// Without the option, a subnet that is no LAN of the host's is not
	// probed (no connected route: the fixture has no route lister).
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.3.0/24,198.18.3.1/24"}})
	if _, err := f.endpoint(netC, epD, "198.18.3.10/24", ""); err != nil || len(pr.probed) != n {
		t.Fatalf("default off: %v, probes %q", err, pr.probed[n:])
	}
}

func TestAddressProbeOption(t *testing.T) {
	f, _ := dhcpFixture(t)
	for _, tc := range []struct{ v, timeout, want string }{
		{"soon", "", `address_probe "soon" is not a duration from 0 (off) to 5s`},
		{"6s", "", `address_probe "6s"`},
		{"-1s", "", `address_probe "-1s"`},
		{"3s", "2s", "does not fit in dhcp_timeout 2s"},
	} {
		o := []string{probeopt.Name, tc.v}
		if tc.timeout != "" {
			o = append(o, config.OptDHCPTimeout, tc.timeout)
		}
		err := f.d.CreateNetwork(context.Background(), dhcpNet(netA, o...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("address_probe=%s: %v, want %q", tc.v, err, tc.want)
		}
	}
}

// announced records the announcements asked for.
type fakeAnnouncer struct {
	mu   sync.Mutex
	sent []string // "parent addr mac count interval"
}

func (a *fakeAnnouncer) Announce(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, strings.Join([]string{parent, addr.String(), mac.String(), fmt.Sprint(count), interval.String()}, " "))
	return nil
}

func (a *fakeAnnouncer) AnnounceIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, count int, interval time.Duration) error {
	return a.Announce(ctx, parent, mac, addr, count, interval)
}

func (a *fakeAnnouncer) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]string(nil), a.sent...)
	sort.Strings(out)
	return out
}

// Announcements after Join, in the background, with Docker's options; none
// where the engine announces (it sent com.docker.network.enable_ipv4), on
// ipvlan l3, or with advertise_addr_nmsgs=0.
func TestAnnouncementsAfterJoin(t *testing.T) {
	f := newFixture(t)
	an := &fakeAnnouncer{}
	f.d.lan.Announcer = an
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0", config.OptAdvertiseMs: "200"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}})
	ctx := context.Background()
	r, err := f.d.CreateEndpoint(ctx, &network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
		Interface: &network.EndpointInterface{Address: "198.18.1.10/24", AddressIPv6: "2001:db8:1::10/64"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.join(netA, epA); err != nil {
		t.Fatal(err)
	}
	mac := r.Interface.MacAddress
	want := []string{"eth0 198.18.1.10 " + mac + " 3 200ms", "eth0 2001:db8:1::10 " + mac + " 3 200ms"}
	waitFor(t, "the announcements", func() bool { return fmt.Sprint(an.got()) == fmt.Sprint(want) })

	// The engine announces: nothing more from underlay.
	req := createReq(netReq{ID: netB, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	req.Options[config.LabelEnableIPv4] = true
	if err := f.d.CreateNetwork(ctx, req); err != nil {
		t.Fatal(err)
	}
	f.mustEndpoint(netB, epB, "198.18.2.10/24")
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth1", "type": "ipvlan", "ipvlan_mode": "l3"}, V4: []string{"198.18.3.0/24"}})
	f.mustEndpoint(netC, epC, "198.18.3.10/24")
	time.Sleep(2 * lan.AnnounceDelay)
	if got := an.got(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("announcements %v: want none for the engine's or ipvlan l3 networks", got)
	}
	for _, tc := range []struct{ k, v, want string }{
		{config.OptAdvertiseNMsgs, "4", "from 0 (no announcements) to 3"}, {config.OptAdvertiseNMsgs, "x", config.OptAdvertiseNMsgs},
		{config.OptAdvertiseMs, "99", "from 100 to 2000"}, {config.OptAdvertiseMs, "2001", config.OptAdvertiseMs},
	} {
		err := f.create(netReq{ID: "dddddddddddd0000000000000000000000000000000000000000000000000009", Opts: map[string]string{"parent": "eth0", tc.k: tc.v}, V4: []string{"198.18.9.0/24"}})
		wantErr(t, err, pluginapi.ErrInvalid, tc.want)
	}
}
