package probe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestConflictErrorMessage(t *testing.T) {
	err := error(&ConflictError{Addr: testAddr4, MAC: otherMAC, Parent: "eth0", Seen: "an ARP reply"})
	if !errors.Is(err, ErrConflict) {
		t.Error("a ConflictError does not wrap ErrConflict")
	}
	for _, want := range []string{"198.18.0.5", "02:00:00:aa:bb:cc", "eth0", "ARP reply"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	probing := &ConflictError{Addr: testAddr4, MAC: otherMAC, Parent: "eth0", Seen: "an ARP probe", Probing: true}
	if !strings.Contains(probing.Error(), "probing for it at the same time") {
		t.Errorf("%q does not say the other host is probing", probing)
	}
}

// The checks come before any socket: the parent here does not exist.
func TestBadInputRefused(t *testing.T) {
	p := New()
	ctx := context.Background()
	const parent = "no-such-link0"
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"IPv6 to Probe", p.Probe(ctx, parent, testMAC, testAddr6, time.Second), "not an IPv4 address"},
		{"IPv4 to ProbeIPv6", p.ProbeIPv6(ctx, parent, testMAC, testAddr4, time.Second), "not an IPv6 address"},
		{"no address", p.Probe(ctx, parent, testMAC, netip.Addr{}, time.Second), "no address"},
		{"0.0.0.0", p.Probe(ctx, parent, testMAC, netip.IPv4Unspecified(), time.Second), "not a unicast address"},
		{"broadcast", p.Announce(ctx, parent, testMAC, netip.MustParseAddr("255.255.255.255"), 1, 0), "not a unicast address"},
		{"multicast v6", p.AnnounceIPv6(ctx, parent, testMAC, netip.MustParseAddr("ff02::1"), 1, 0), "not a unicast address"},
		{"IPv4 to AnnounceIPv6", p.AnnounceIPv6(ctx, parent, testMAC, testAddr4, 1, 0), "not an IPv6 address"},
		{"short MAC", p.Probe(ctx, parent, testMAC[:4], testAddr4, time.Second), "not a unicast Ethernet address"},
		{"multicast MAC", p.Announce(ctx, parent, net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}, testAddr4, 1, 0), "not a unicast Ethernet address"},
		{"zero MAC", p.ProbeIPv6(ctx, parent, make(net.HardwareAddr, 6), testAddr6, time.Second), "not a unicast Ethernet address"},
		{"no parent", p.Probe(ctx, "", testMAC, testAddr4, time.Second), "no parent"},
		{"negative budget", p.Probe(ctx, parent, testMAC, testAddr4, -time.Second), "negative"},
		{"negative count", p.Announce(ctx, parent, testMAC, testAddr4, -1, 0), "must not be negative"},
		{"negative interval", p.AnnounceIPv6(ctx, parent, testMAC, testAddr6, 3, -time.Second), "must not be negative"},
		{"missing parent", p.Probe(ctx, parent, testMAC, testAddr4, time.Second), "no-such-link0"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, c.err, c.want)
		}
	}
}

// Budget 0 and count 0 do nothing, not even open a socket.
func TestZeroDoesNothing(t *testing.T) {
	p := New()
	ctx := context.Background()
	const parent = "no-such-link0"
	for name, err := range map[string]error{
		"Probe":        p.Probe(ctx, parent, testMAC, testAddr4, 0),
		"ProbeIPv6":    p.ProbeIPv6(ctx, parent, testMAC, testAddr6, 0),
		"Announce":     p.Announce(ctx, parent, testMAC, testAddr4, 0, time.Second),
		"AnnounceIPv6": p.AnnounceIPv6(ctx, parent, testMAC, testAddr6, 0, time.Second),
	} {
		if err != nil {
			t.Errorf("%s with 0: %v, want nil", name, err)
		}
	}
}
