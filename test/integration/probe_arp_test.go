package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// A LAN host that holds the address answers the probe (its kernel answers
// ARP probes): a conflict naming its MAC, long before the budget ends;
// also when the probe's MAC is the parent's (ipvlan) and when a macvlan
// link with the probe's MAC already exists on the parent (its rx_handler
// takes the reply from per-protocol sockets of the parent).
func TestProbeConflictWithLANHost(t *testing.T) {
	// Serial: its assertions are timing bounds (the first answer ends the
	// probe before its second probe would go out).
	l := newProbeLAN(t)
	addr := netip.MustParseAddr("198.18.7.1")
	l.lan.AddAddr(probeLANEnd, "198.18.7.1/24")
	parentMAC := l.host.MustLink(probeParent).Attrs().HardwareAddr
	for _, c := range []struct {
		name string
		mac  net.HardwareAddr
		prep func()
	}{
		{"macvlan endpoint without a link yet", probeMAC, func() {}},
		{"ipvlan endpoint (the parent's MAC)", parentMAC, func() {}},
		{"macvlan link already on the parent", probeMAC, func() {
			mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv0", ParentIndex: l.host.MustLink(probeParent).Attrs().Index,
				HardwareAddr: probeMAC}, Mode: netlink.MACVLAN_MODE_BRIDGE}
			if err := l.host.NL.LinkAdd(mv); err != nil {
				t.Fatalf("add macvlan mv0: %v", err)
			}
			l.host.Up("mv0")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.prep()
			// A long budget, so the bound below leaves a loaded emulated
			// VM seconds: a probe that is answered never waits for it.
			budget := 12 * time.Second
			start := time.Now()
			err := l.prober.Probe(context.Background(), probeParent, c.mac, addr, budget)
			took := time.Since(start)
			ce := wantConflict(t, err, addr, l.lanMAC)
			if ce.Seen != "an ARP reply" {
				t.Errorf("seen %q, want an ARP reply", ce.Seen)
			}
			if took >= budget/3 {
				t.Errorf("took %s: the answer to the first probe must end it, before the second (at %s)", took, budget/3)
			}
		})
	}
}

// Nobody holds the address: nil after the budget; the LAN sees exactly 3
// ARP probes (sender MAC the endpoint's, sender IP 0.0.0.0, target the
// address, to broadcast) about budget/3 apart; the endpoint's MAC is in
// the parent's unicast filter only while the probe runs.
func TestProbeNoAnswer(t *testing.T) {
	// Serial: its assertions are timing bounds (the probe's budget, the spacing of its frames).
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "198.18.7.1/24") // the LAN host holds another address
	capt := l.capture()
	addr := netip.MustParseAddr("198.18.7.5")
	budget := 900 * time.Millisecond

	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- l.prober.Probe(context.Background(), probeParent, probeMAC, addr, budget) }()
	time.Sleep(budget / 3)
	member := inUnicastFilter(t, l.host, probeParent, probeMAC)
	err := <-errc
	took := time.Since(start)
	if err != nil {
		t.Fatalf("probe of a free address: %v, want nil", err)
	}
	if took < budget || took >= budget+time.Second {
		t.Errorf("took %s, want its budget %s (less than 1 s more)", took, budget)
	}
	t.Logf("a probe with a %s budget nobody answered took %s", budget, took)
	if !member {
		t.Errorf("%s was not in %s's unicast filter while the probe ran", probeMAC, probeParent)
	}
	if inUnicastFilter(t, l.host, probeParent, probeMAC) {
		t.Errorf("%s is still in %s's unicast filter after the probe", probeMAC, probeParent)
	}

	probes := capt.wantMatches(t, "ARP probes", 3, func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && bytes.Equal(a.EthSrc, probeMAC)
	})
	for i, f := range probes {
		a, _ := itest.ReadARP(f.B)
		if a.Op != 1 || !bytes.Equal(a.SHA, probeMAC) || !a.SPA.IsUnspecified() || a.TPA != addr ||
			!bytes.Equal(a.EthDst, broadcast) || !bytes.Equal(a.THA, make([]byte, 6)) {
			t.Errorf("probe %d: op %d from %s %s for %s (%s) to %s, want a request from %s 0.0.0.0 for %s (00:00:00:00:00:00) to broadcast",
				i+1, a.Op, a.SHA, a.SPA, a.TPA, a.THA, a.EthDst, probeMAC, addr)
		}
	}
	wantSpacing(t, "probe", probes, budget/6, budget/3+500*time.Millisecond)
}

// Another host probing for the same address at the same time is a
// conflict too (RFC 5227 §2.1.1).
func TestProbeSimultaneousProbe(t *testing.T) {
	// Serial: a frame sent 200 ms in must reach the probe within its budget.
	l := newProbeLAN(t)
	addr := netip.MustParseAddr("198.18.7.9")
	other := net.HardwareAddr{0x02, 0x00, 0x00, 0x07, 0x00, 0x09}
	var conn *packet.Conn
	if err := l.lan.Do(func() error {
		ifi, err := net.InterfaceByName(probeLANEnd)
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	}); err != nil {
		t.Fatalf("packet socket in the LAN: %v", err)
	}
	defer conn.Close()
	frame := append(append(append([]byte{}, broadcast...), other...), 0x08, 0x06,
		0, 1, 8, 0, 6, 4, 0, 1)
	frame = append(append(append(append(frame, other...), 0, 0, 0, 0), make([]byte, 6)...), addr.AsSlice()...)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = conn.WriteTo(frame, &packet.Addr{HardwareAddr: broadcast})
	}()
	err := l.prober.Probe(context.Background(), probeParent, probeMAC, addr, 3*time.Second)
	if ce := wantConflict(t, err, addr, other); !ce.Probing {
		t.Errorf("conflict %+v: not marked as a simultaneous probe", ce)
	}
}

// A context that ends first ends the probe with its error.
func TestProbeContextEnds(t *testing.T) {
	// Serial: it bounds the probe's time after its context ends.
	l := newProbeLAN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := l.prober.Probe(ctx, probeParent, probeMAC, netip.MustParseAddr("198.18.7.5"), 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe whose context ended: %v, want context.DeadlineExceeded wrapped", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s after its context ended at 200ms", took)
	}
}

// Announce: count gratuitous ARP requests (sender IP = target IP = the
// address, sender MAC the endpoint's, to broadcast) interval apart, and
// the LAN host's stale neighbour entry for the address follows them.
func TestAnnounceGratuitousARP(t *testing.T) {
	// Serial: its assertions are timing bounds (the announcements' duration and spacing).
	l := newProbeLAN(t)
	l.lan.AddAddr(probeLANEnd, "198.18.7.1/24")
	addr := netip.MustParseAddr("198.18.7.5")
	addNeigh(t, l.lan, probeLANEnd, addr, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99})
	capt := l.capture()
	interval := 250 * time.Millisecond
	start := time.Now()
	if err := l.prober.Announce(context.Background(), probeParent, probeMAC, addr, 3, interval); err != nil {
		t.Fatalf("announce: %v", err)
	}
	if took := time.Since(start); took < 2*interval || took > 2*interval+time.Second {
		t.Errorf("3 announcements %s apart took %s, want about %s", interval, took, 2*interval)
	}
	got := capt.wantMatches(t, "announcements", 3, func(b []byte) bool {
		a, ok := itest.ReadARP(b)
		return ok && bytes.Equal(a.EthSrc, probeMAC)
	})
	for i, f := range got {
		a, _ := itest.ReadARP(f.B)
		if a.Op != 1 || !bytes.Equal(a.SHA, probeMAC) || a.SPA != addr || a.TPA != addr || !bytes.Equal(a.EthDst, broadcast) {
			t.Errorf("announcement %d: op %d from %s %s for %s to %s, want a request from %s %s for itself to broadcast",
				i+1, a.Op, a.SHA, a.SPA, a.TPA, a.EthDst, probeMAC, addr)
		}
	}
	wantSpacing(t, "announcement", got, interval/2, interval+500*time.Millisecond)
	if m := neighMAC(t, l.lan, probeLANEnd, addr); !bytes.Equal(m, probeMAC) {
		t.Errorf("the LAN host's neighbour entry for %s is %s after the announcements, want %s", addr, m, probeMAC)
	}
}

// A frame of another VLAN on the parent's wire (802.1Q-tagged) is another
// LAN's: an ARP reply for the address from there is no conflict, the same
// reply untagged is.
func TestProbeIgnoresOtherVLANs(t *testing.T) {
	// Serial: frames sent 100-300 ms in must reach an 800 ms probe.
	l := newProbeLAN(t)
	addr := netip.MustParseAddr("198.18.7.10")
	other := net.HardwareAddr{0x02, 0x00, 0x00, 0x07, 0x00, 0x10}
	var conn *packet.Conn
	if err := l.lan.Do(func() error {
		ifi, err := net.InterfaceByName(probeLANEnd)
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	}); err != nil {
		t.Fatalf("packet socket in the LAN: %v", err)
	}
	defer conn.Close()
	reply := append(append(append(append([]byte{0, 1, 8, 0, 6, 4, 0, 2}, other...), addr.AsSlice()...), probeMAC...), 0, 0, 0, 0)
	head := append(append([]byte{}, probeMAC...), other...)
	tagged := append(append(append([]byte{}, head...), 0x81, 0x00, 0x00, 10, 0x08, 0x06), reply...)
	untagged := append(append(append([]byte{}, head...), 0x08, 0x06), reply...)
	sendDuring := func(frame []byte) error {
		go func() {
			for range 3 {
				time.Sleep(100 * time.Millisecond)
				_, _ = conn.WriteTo(frame, &packet.Addr{HardwareAddr: probeMAC})
			}
		}()
		return l.prober.Probe(context.Background(), probeParent, probeMAC, addr, 800*time.Millisecond)
	}
	if err := sendDuring(tagged); err != nil {
		t.Errorf("probe while VLAN 10 answers for %s: %v, want nil", addr, err)
	}
	wantConflict(t, sendDuring(untagged), addr, other)
}
