package integration

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

var allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}

// requireIPv6 skips (fails in CI) where the kernel has no IPv6.
func requireIPv6(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		return
	}
	if itest.InCI() {
		t.Fatal("this kernel has no IPv6 (/proc/sys/net/ipv6 is missing) and CI needs it")
	}
	t.Skip("skipped: this kernel has no IPv6")
}

// AnnounceIPv6: count unsolicited NAs (from the address to ff02::1, hop
// limit 255, override set, solicited and router clear, target the
// address, target link-layer address the endpoint's MAC) interval apart,
// and the LAN host's kernel takes them: its stale neighbour entry for the
// address follows.
func TestAnnounceIPv6UnsolicitedNA(t *testing.T) {
	// Serial: its assertions are timing bounds (the spacing of the advertisements).
	requireIPv6(t)
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "2001:db8:7::1/64")
	addr := netip.MustParseAddr("2001:db8:7::5")
	addNeigh(t, l.lan, probeLANEnd, addr, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99})
	capt := l.capture()
	interval := 200 * time.Millisecond
	if err := l.prober.AnnounceIPv6(context.Background(), probeParent, probeMAC, addr, 2, interval); err != nil {
		t.Fatalf("announce: %v", err)
	}
	got := capt.wantMatches(t, "Neighbour Advertisements", 2, func(b []byte) bool {
		f, ok := itest.ReadNDP(b)
		return ok && f.Type == 136 && bytes.Equal(f.EthSrc, probeMAC)
	})
	for i, c := range got {
		f, _ := itest.ReadNDP(c.B)
		if !bytes.Equal(f.EthDst, allNodesMAC) || f.Src != addr || f.Dst != netip.MustParseAddr("ff02::1") || f.HopLimit != 255 {
			t.Errorf("NA %d: %s -> %s, %s -> %s, hop limit %d; want %s -> %s, %s -> ff02::1, 255",
				i+1, f.EthSrc, f.EthDst, f.Src, f.Dst, f.HopLimit, probeMAC, allNodesMAC, addr)
		}
		if f.Flags&0xe0 != 0x20 || f.Target != addr || f.OptType != 2 || !bytes.Equal(f.OptMAC, probeMAC) {
			t.Errorf("NA %d: flags %#02x target %s option %d %s; want override only (0x20), %s, target link-layer address %s",
				i+1, f.Flags, f.Target, f.OptType, f.OptMAC, addr, probeMAC)
		}
	}
	wantSpacing(t, "NA", got, interval/2, interval+500*time.Millisecond)
	if !itest.WaitFor(2*time.Second, func() bool { return bytes.Equal(neighMAC(t, l.lan, probeLANEnd, addr), probeMAC) }) {
		t.Errorf("the LAN host's neighbour entry for %s is %s after the NAs, want %s (its kernel refused them?)",
			addr, neighMAC(t, l.lan, probeLANEnd, addr), probeMAC)
	}
}

// ProbeIPv6 of an address a LAN host holds: its kernel answers the
// duplicate address detection NS; a conflict naming its MAC.
func TestProbeIPv6ConflictWithLANHost(t *testing.T) {
	// Serial: it bounds the probe's time (the first answer ends it before
	// its second probe would go out; a long budget leaves a loaded
	// emulated VM seconds, and an answered probe never waits for it).
	requireIPv6(t)
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "2001:db8:7::1/64")
	addr := netip.MustParseAddr("2001:db8:7::1")
	budget := 12 * time.Second
	start := time.Now()
	err := l.prober.ProbeIPv6(context.Background(), probeParent, probeMAC, addr, budget)
	took := time.Since(start)
	if ce := wantConflict(t, err, addr, l.lanMAC); ce.Seen != "a Neighbour Advertisement" {
		t.Errorf("seen %q, want a Neighbour Advertisement", ce.Seen)
	}
	if took >= budget/3 {
		t.Errorf("took %s: the answer to the first probe must end it, before the second (at %s)", took, budget/3)
	}
	t.Logf("the conflict was found after %s", took)
}

// ProbeIPv6 of a free address: nil after the budget, and the LAN sees 3
// NSs from :: to the address's solicited-node group, target the address,
// without options.
func TestProbeIPv6NoAnswer(t *testing.T) {
	// Serial: its assertions are timing bounds (the probe's budget, the spacing of its frames).
	requireIPv6(t)
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "2001:db8:7::1/64")
	capt := l.capture()
	addr := netip.MustParseAddr("2001:db8:7::5")
	budget := 600 * time.Millisecond
	start := time.Now()
	if err := l.prober.ProbeIPv6(context.Background(), probeParent, probeMAC, addr, budget); err != nil {
		t.Fatalf("probe of a free address: %v, want nil", err)
	}
	if took := time.Since(start); took < budget || took >= budget+time.Second {
		t.Errorf("took %s, want its budget %s (less than 1 s more)", took, budget)
	}
	got := capt.wantMatches(t, "duplicate address detection NSs", 3, func(b []byte) bool {
		f, ok := itest.ReadNDP(b)
		return ok && f.Type == 135 && bytes.Equal(f.EthSrc, probeMAC)
	})
	group := netip.MustParseAddr("ff02::1:ff00:5")
	for i, c := range got {
		f, _ := itest.ReadNDP(c.B)
		if !f.Src.IsUnspecified() || f.Dst != group || f.Target != addr || f.HopLimit != 255 || len(c.B) != 78 ||
			!bytes.Equal(f.EthDst, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 5}) {
			t.Errorf("NS %d: %s -> %s (%s) target %s hop limit %d, %d bytes; want :: -> %s (33:33:ff:00:00:05) target %s, 255, 78 bytes",
				i+1, f.Src, f.Dst, f.EthDst, f.Target, f.HopLimit, len(c.B), group, addr)
		}
	}
	wantSpacing(t, "NS", got, budget/6, budget/3+500*time.Millisecond)
}
