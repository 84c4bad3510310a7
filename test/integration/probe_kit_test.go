package integration

// The test LAN of the address probe's tests (probe_arp_test.go,
// probe_ndp_test.go): a "host" namespace with the parent vp0, one end of
// a veth whose other end lan0 is in a "LAN" namespace, where a capture
// (an ETH_P_ALL packet socket) records every frame lan0 receives and
// sends, and where the kernel plays the LAN's other hosts.

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/probe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	probeParent = "vp0"
	probeLANEnd = "lan0"
)

// probeMAC is the endpoint's MAC the tests probe and announce with.
var probeMAC = net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0x07, 0x05}

// probeLAN is the test LAN.
type probeLAN struct {
	t      *testing.T
	host   *itest.Netns
	lan    *itest.Netns
	lanMAC net.HardwareAddr // lan0's
	prober *probe.Prober    // opens its sockets in host
}

func newProbeLAN(t *testing.T) *probeLAN {
	t.Helper()
	itest.RequireRoot(t)
	host, lan := itest.NewNetns(t), itest.NewNetns(t)
	host.AddVeth(probeParent, probeLANEnd, 1500)
	l := host.MoveLink(probeLANEnd, lan, probeLANEnd)
	lan.Up(probeLANEnd) // a link moved to a namespace arrives down
	// Until the kernel's link watch has seen the carrier and given vp0
	// its queue, what is sent on it is dropped: wait for that.
	operUp := func(ns *itest.Netns, name string) bool { return ns.MustLink(name).Attrs().OperState == netlink.OperUp }
	if !itest.WaitFor(5*time.Second, func() bool { return operUp(host, probeParent) && operUp(lan, probeLANEnd) }) {
		t.Fatalf("%s or %s is not operationally up 5 s after being set up", probeParent, probeLANEnd)
	}
	return &probeLAN{t: t, host: host, lan: lan, lanMAC: l.Attrs().HardwareAddr,
		prober: probe.New(probe.WithNetns(host.Handle()))}
}

// capture records lan0's frames (what the LAN sees) until the test ends.
type capture struct{ *itest.Capture }

func (l *probeLAN) capture() capture {
	l.t.Helper()
	return capture{itest.StartCapture(l.t, l.lan, probeLANEnd)}
}

func (c capture) match(keep func([]byte) bool) []itest.Frame { return c.Match(keep) }

// wantMatches waits up to 3 s for n frames keep keeps, then 300 ms more
// for any extra one, and returns them; it fails unless there are exactly n.
func (c capture) wantMatches(t *testing.T, what string, n int, keep func([]byte) bool) []itest.Frame {
	t.Helper()
	return c.WantMatches(t, what, n, 3*time.Second, keep)
}

// wantSpacing fails unless consecutive frames are at least lo apart and
// the closest two at most hi apart.
func wantSpacing(t *testing.T, what string, fs []itest.Frame, lo, hi time.Duration) {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(fs); i++ {
		d := fs[i].At.Sub(fs[i-1].At)
		gaps = append(gaps, d)
		if d < lo {
			t.Errorf("%s %d came %s after the one before, want %s to %s", what, i+1, d, lo, hi)
		}
	}
	// Every gap at least lo (no burst), and the shortest at most hi (the
	// interval asked for was kept): a sender that kept a longer interval
	// has every gap above hi, while a scheduler stall on a loaded machine
	// stretches one gap, not all of them.
	if len(gaps) > 0 && slices.Min(gaps) > hi {
		t.Errorf("%ss came %v apart, want %s to %s", what, gaps, lo, hi)
	}
}

// wantConflict fails unless err is a *probe.ConflictError for addr naming mac.
func wantConflict(t *testing.T, err error, addr netip.Addr, mac net.HardwareAddr) *probe.ConflictError {
	t.Helper()
	var ce *probe.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, probe.ErrConflict) {
		t.Fatalf("probe of %s: %v, want a *probe.ConflictError wrapping ErrConflict", addr, err)
	}
	if ce.Addr != addr || !bytes.Equal(ce.MAC, mac) || ce.Parent != probeParent {
		t.Fatalf("conflict %+v, want %s held by %s on %s", ce, addr, mac, probeParent)
	}
	for _, s := range []string{addr.String(), mac.String()} {
		if !bytes.Contains([]byte(err.Error()), []byte(s)) {
			t.Errorf("%q does not name %s", err, s)
		}
	}
	return ce
}

// inUnicastFilter reports whether mac is in the host's unicast address
// list of link (the bridge fdb dump of a non-bridge link lists it).
func inUnicastFilter(t *testing.T, ns *itest.Netns, link string, mac net.HardwareAddr) bool {
	t.Helper()
	neighs, err := ns.NL.NeighList(ns.MustLink(link).Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatalf("list the address filter of %s: %v", link, err)
	}
	for _, n := range neighs {
		if bytes.Equal(n.HardwareAddr, mac) {
			return true
		}
	}
	return false
}

// addNeigh adds a STALE neighbour entry addr -> mac on link, as if the
// LAN host had talked to addr when another MAC held it.
func addNeigh(t *testing.T, ns *itest.Netns, link string, addr netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	family := unix.AF_INET
	if addr.Is6() {
		family = unix.AF_INET6
	}
	n := &netlink.Neigh{LinkIndex: ns.MustLink(link).Attrs().Index, Family: family, State: netlink.NUD_STALE,
		IP: addr.AsSlice(), HardwareAddr: mac}
	if err := ns.NL.NeighAdd(n); err != nil {
		t.Fatalf("neighbour %s -> %s on %s: %v", addr, mac, link, err)
	}
}

// neighMAC returns the MAC of the neighbour entry for addr on link, or nil.
func neighMAC(t *testing.T, ns *itest.Netns, link string, addr netip.Addr) net.HardwareAddr {
	t.Helper()
	family := unix.AF_INET
	if addr.Is6() {
		family = unix.AF_INET6
	}
	neighs, err := ns.NL.NeighList(ns.MustLink(link).Attrs().Index, family)
	if err != nil {
		t.Fatalf("list the neighbours on %s: %v", link, err)
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr {
			return n.HardwareAddr
		}
	}
	return nil
}
