package itest

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// arpProbe is an ARP probe (sender IP 0.0.0.0) for target from src.
func arpProbe(src net.HardwareAddr, target netip.Addr) []byte {
	b := make([]byte, 42)
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(b[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(b[16:], 0x0800) // IPv4
	b[18], b[19] = 6, 4
	binary.BigEndian.PutUint16(b[20:], 1) // request
	copy(b[22:28], src)
	t4 := target.As4()
	copy(b[38:42], t4[:])
	return b
}

// sendFrame sends a raw frame (its own Ethernet header, any source) out of
// link in ns.
func sendFrame(t *testing.T, ns *Netns, link string, frame []byte) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		c, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[0:6]})
		return err
	})
	if err != nil {
		t.Fatalf("send a frame out of %s: %v", link, err)
	}
}

// The switch's port security drops a frame from an unknown source MAC on
// the parent's port and passes the parent's own (which the gateway
// answers); an open switch passes both. The capture on the parent's port
// sees both either way, and FromNear tells the near side's frames from
// the gateway's.
func TestSwitchLANPortSecurity(t *testing.T) {
	RequireRoot(t)
	t.Parallel()
	for _, secure := range []bool{false, true} {
		near := NewNetns(t)
		lan := NewSwitchLAN(t, near, "lan0", 7)
		gw := lan.Gateway()
		var ps *PortSecurity
		if secure {
			ps = lan.PortSecurity()
		}
		port := lan.Capture()
		atGW := StartCapture(t, gw.NS, gw.Link)
		atParent := StartCapture(t, near, lan.Parent)
		fresh := net.HardwareAddr{0x02, 0x42, 0xde, 0xad, 0xbe, 0xef}

		probeFrom := func(src net.HardwareAddr) func([]byte) bool {
			return func(b []byte) bool {
				a, ok := ReadARP(b)
				return ok && a.Op == 1 && bytes.Equal(a.EthSrc, src) && a.TPA == gw.Addr4.Addr()
			}
		}
		sendFrame(t, near, lan.Parent, arpProbe(lan.ParentMAC, gw.Addr4.Addr()))
		sendFrame(t, near, lan.Parent, arpProbe(fresh, gw.Addr4.Addr()))

		atGW.WantMatches(t, "probes from the parent's MAC at the gateway", 1, 3*time.Second, probeFrom(lan.ParentMAC))
		want := 1
		if secure {
			want = 0
		}
		atGW.WantMatches(t, "probes from a fresh MAC at the gateway", want, time.Second, probeFrom(fresh))
		atParent.WantMatches(t, "the gateway's ARP replies to the parent's MAC", 1, 3*time.Second, func(b []byte) bool {
			a, ok := ReadARP(b)
			return ok && a.Op == 2 && bytes.Equal(a.EthSrc, gw.MAC) && bytes.Equal(a.THA, lan.ParentMAC)
		})
		if secure {
			if n := ps.Dropped(); n != 1 {
				t.Errorf("port security dropped %d frames, want 1", n)
			}
		}
		var fromNear int
		for _, f := range lan.FromNear(port) {
			if w := ReadWire(f.B); w.Kind == "arp" && w.Type == 1 && w.ARP.TPA == gw.Addr4.Addr() {
				fromNear++
			}
		}
		if fromNear != 2 {
			t.Errorf("secure %v: the capture on the parent's port saw %d ARP probes from the near side, want 2", secure, fromNear)
		}
	}
}

// The parent's MTU is settable; dnsmasq on a host of the switch serves
// DHCPv4 and RAs (seen on the parent).
func TestSwitchLANDnsmasqAndMTU(t *testing.T) {
	RequireRoot(t)
	t.Parallel()
	near := NewNetns(t)
	lan := NewSwitchLAN(t, near, "lan0", 8)
	lan.SetParentMTU(1400)
	if mtu := near.MustLink("lan0").Attrs().MTU; mtu != 1400 {
		t.Fatalf("parent MTU %d, want 1400", mtu)
	}
	atParent := StartCapture(t, near, lan.Parent)
	srv := lan.Host("dhcp", 3)
	d := srv.Dnsmasq(LANDnsmasq{V4: true, V6: "ra-only"})
	atParent.WantMatches(t, "RAs from the dnsmasq host", 1, 20*time.Second, func(b []byte) bool {
		w := ReadWire(b)
		return w.Kind == "icmpv6" && w.Type == 134 && bytes.Equal(w.Src, srv.MAC)
	})
	if len(d.Leases()) != 0 {
		t.Errorf("leases before any client: %v", d.Leases())
	}
}

// ReadWire tells ARP, DHCP, DHCPv6, ICMPv6 behind hop-by-hop options and
// ICMP echo apart.
func TestReadWire(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	if w := ReadWire(arpProbe(mac, netip.MustParseAddr("198.18.1.1"))); w.Kind != "arp" || w.Type != 1 || w.ARP.SPA != netip.IPv4Unspecified() {
		t.Errorf("ARP probe: %v", w)
	}
	eth := func(et uint16, p []byte) []byte {
		b := append(make([]byte, 12), byte(et>>8), byte(et))
		copy(b[6:12], mac)
		return append(b, p...)
	}
	ip4 := func(proto byte, p []byte) []byte {
		h := make([]byte, 20)
		h[0], h[9] = 0x45, proto
		return append(h, p...)
	}
	udp := func(sp, dp uint16, p []byte) []byte {
		h := make([]byte, 8)
		binary.BigEndian.PutUint16(h, sp)
		binary.BigEndian.PutUint16(h[2:], dp)
		return append(h, p...)
	}
	d, err := dhcpv4.NewDiscovery(mac)
	if err != nil {
		t.Fatal(err)
	}
	if w := ReadWire(eth(unix.ETH_P_IP, ip4(unix.IPPROTO_UDP, udp(68, 67, d.ToBytes())))); w.Kind != "dhcp" || w.Type != int(dhcpv4.MessageTypeDiscover) {
		t.Errorf("DISCOVER: %v", w)
	}
	if w := ReadWire(eth(unix.ETH_P_IP, ip4(unix.IPPROTO_ICMP, []byte{8, 0, 0, 0}))); w.Kind != "ipv4" || w.Type != unix.IPPROTO_ICMP {
		t.Errorf("echo: %v", w)
	}
	ip6 := func(next byte, p []byte) []byte {
		h := make([]byte, 40)
		h[0], h[6] = 0x60, next
		return append(h, p...)
	}
	hbh := append([]byte{unix.IPPROTO_ICMPV6, 0, 5, 2, 0, 0, 1, 0}, 143, 0)
	if w := ReadWire(eth(unix.ETH_P_IPV6, ip6(0, hbh))); w.Kind != "icmpv6" || w.Type != 143 {
		t.Errorf("MLDv2 report: %v", w)
	}
	if w := ReadWire(eth(unix.ETH_P_IPV6, ip6(unix.IPPROTO_ICMPV6, []byte{133, 0}))); w.Kind != "icmpv6" || w.Type != 133 {
		t.Errorf("RS: %v", w)
	}
	if w := ReadWire(eth(unix.ETH_P_IPV6, ip6(unix.IPPROTO_UDP, udp(546, 547, []byte{1, 0, 0, 0})))); w.Kind != "dhcpv6" || w.Type != 1 {
		t.Errorf("Solicit: %v", w)
	}
}
