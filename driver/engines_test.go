package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// What current engines offer remote drivers: GwAllocCheck (no gateway
// address reserved where underlay uses none) and the container's interface
// name (Join's DstName).
func TestGwAllocCheck(t *testing.T) {
	f := newFixture(t)
	if !f.d.GetCapabilities(context.Background()).GwAllocChecker {
		t.Fatal("GetCapabilities does not advertise GwAllocChecker")
	}
	for _, tc := range []struct {
		name     string
		opts     map[string]any
		skip     bool
		errorHas string
	}{
		{"macvlan uses the LAN's router", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0"}}, false, ""},
		{"ipvlan l2 uses the LAN's router", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0", "type": "ipvlan"}}, false, ""},
		{"ipvlan l3: connected routes", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0", "ipvlan_mode": "l3"}}, true, ""},
		{"ipvlan l3s", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0", "ipvlan_mode": "l3s"}}, true, ""},
		{"internal with a parent: still on the LAN, whose router may hold the address", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0"}, config.LabelInternal: true}, false, ""},
		{"no parent: internal on a dummy", map[string]any{config.LabelGeneric: map[string]any{}}, true, ""},
		{"no options at all", nil, true, ""},
		{"a bad option is refused as CreateNetwork would", map[string]any{config.LabelGeneric: map[string]any{"parent": "eth0", "ipvlan_mode": "l9"}}, false, "ipvlan_mode"},
	} {
		r, err := config.GwAllocCheck(&config.GwAllocCheckRequest{Options: tc.opts})
		switch {
		case tc.errorHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
				t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.errorHas)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case r.SkipIPv4 != tc.skip || r.SkipIPv6 != tc.skip:
			t.Errorf("%s: %+v, want skip %v for both families", tc.name, r, tc.skip)
		}
	}
}

func TestEndpointInterfaceName(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	ctx := context.Background()
	create := func(ep string, opts map[string]any) error {
		_, err := f.d.CreateEndpoint(ctx, &network.CreateEndpointRequest{NetworkID: netA, EndpointID: ep,
			Interface: &network.EndpointInterface{Address: "198.18.1.10/24"}, Options: opts})
		return err
	}
	for _, bad := range []struct{ name, want string }{
		{"", "without a name"}, {"lo", "reserved"}, {"averyverylongname", "at most 15"}, {"a/b", "not a valid"}, {"a b", "not a valid"}, {"x:1", "not a valid"},
	} {
		err := create(epB, map[string]any{config.OptEndpointIfName: bad.name})
		wantErr(t, err, pluginapi.ErrInvalid, bad.want, config.OptEndpointIfName)
	}
	if err := create(epA, map[string]any{config.OptEndpointIfName: "lan7"}); err != nil {
		t.Fatal(err)
	}
	j, err := f.join(netA, epA)
	if err != nil {
		t.Fatal(err)
	}
	if j.InterfaceName.DstName != "lan7" || j.InterfaceName.DstPrefix != "eth" {
		t.Fatalf("Join answered %+v: want DstName lan7 (current engines) and DstPrefix eth (older ones)", j.InterfaceName)
	}
	// Without the option, no DstName: Docker names it.
	if _, err := f.endpoint(netA, epC, "198.18.1.11/24", ""); err != nil {
		t.Fatal(err)
	}
	if j, err := f.join(netA, epC); err != nil || j.InterfaceName.DstName != "" {
		t.Fatalf("Join without the option: %+v, %v", j, err)
	}
}

// IPv6-only networks (--ipv4=false on current engines: IPv4Data is []):
// created, their endpoints join with the IPv6 gateway only.
func TestIPv6OnlyNetwork(t *testing.T) {
	f := newFixture(t)
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}, V6: []string{"2001:db8:1::/64,2001:db8:1::1/64"}})
	if _, err := f.d.CreateEndpoint(context.Background(), &network.CreateEndpointRequest{NetworkID: netA, EndpointID: epA,
		Interface: &network.EndpointInterface{AddressIPv6: "2001:db8:1::10/64"}}); err != nil {
		t.Fatal(err)
	}
	j, err := f.join(netA, epA)
	if err != nil || j.Gateway != "" || j.GatewayIPv6 != "2001:db8:1::1" {
		t.Fatalf("Join of an IPv6-only endpoint: %+v, %v; want the IPv6 gateway only", j, err)
	}
}

// Announcements end with the endpoint's Leave (before the first goes) and
// are not sent for advertise_addr_nmsgs=0 or internal networks; an ipvlan
// l2 endpoint is announced from the parent's MAC.
func TestAnnouncementsEndAndSkip(t *testing.T) {
	f := newFixture(t)
	an := &fakeAnnouncer{}
	f.d.lan.Announcer = an
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	f.mustEndpoint(netA, epA, "198.18.1.10/24")
	if err := f.d.Leave(context.Background(), &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(netReq{ID: netB, Opts: map[string]string{"parent": "eth1", config.OptAdvertiseNMsgs: "0"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	f.mustEndpoint(netB, epB, "198.18.2.10/24")
	f.mustCreate(netReq{ID: netC, Opts: map[string]string{"parent": "eth1"}, V4: []string{"198.18.3.0/24"}, Internal: true})
	f.mustEndpoint(netC, epC, "198.18.3.10/24")
	time.Sleep(2 * lan.AnnounceDelay)
	if got := an.got(); len(got) != 0 {
		t.Fatalf("announced %v: want nothing after Leave, with nmsgs=0, or on an internal network", got)
	}
	f.k.AddLink(kernel.Link{Name: "lan9", Kind: "device", MTU: 1500, MAC: "02:00:00:00:00:09"})
	f.mustCreate(netReq{ID: "dddddddddddd0000000000000000000000000000000000000000000000000004", Opts: map[string]string{"parent": "lan9", "type": "ipvlan"}, V4: []string{"198.18.4.0/24,198.18.4.1/24"}})
	f.mustEndpoint("dddddddddddd0000000000000000000000000000000000000000000000000004", epD, "198.18.4.10/24")
	waitFor(t, "the ipvlan announcement", func() bool { return len(an.got()) == 1 })
	if got := an.got()[0]; got != "lan9 198.18.4.10 02:00:00:00:00:09 3 1s" {
		t.Fatalf("ipvlan announcement %q: want it from the parent's MAC", got)
	}
}
