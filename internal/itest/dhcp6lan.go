package itest

// A test IPv6 LAN with dnsmasq as its router and DHCPv6 server, for the
// DHCPv6 client's tests (dhcp6/dnsmasq_test.go): a parent link in the
// client's namespace whose far end, in a namespace of the LAN's own,
// holds the router's address, forwards (or dnsmasq advertises a router
// lifetime of 0), and runs dnsmasq with --enable-ra and a DHCPv6 range.

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LAN6ServerLink is the name of the IPv6 LAN's far end, in its namespace.
const LAN6ServerLink = "rtr6"

// LAN6 is a test IPv6 LAN: Parent, one end of a veth in Near, and its
// peer LAN6ServerLink with Router in Far.
type LAN6 struct {
	t      testing.TB
	Near   *Netns
	Far    *Netns
	Parent string
	Router netip.Prefix
}

// NewLAN6 makes the LAN: parent (up) in near, its peer in a new namespace
// with router on it (no duplicate address detection there, so that its
// addresses are usable at once) and forwarding on.
func NewLAN6(t testing.TB, near *Netns, parent string, router netip.Prefix) *LAN6 {
	t.Helper()
	far := NewNetns(t)
	far.Sysctl("net.ipv6.conf.default.accept_dad", "0")
	far.Sysctl("net.ipv6.conf.all.forwarding", "1")
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: parent, MTU: 1500}, PeerName: LAN6ServerLink, PeerNamespace: netlink.NsFd(int(far.Handle()))}
	if err := near.NL.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s with its peer %s in the LAN's namespace: %v", parent, LAN6ServerLink, err)
	}
	near.Up(parent)
	srv := far.MustLink(LAN6ServerLink)
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: router.Addr().AsSlice(), Mask: net.CIDRMask(router.Bits(), 128)}, Flags: unix.IFA_F_NODAD}
	if err := far.NL.AddrAdd(srv, addr); err != nil {
		t.Fatalf("address %s on %s: %v", router, LAN6ServerLink, err)
	}
	far.Up(LAN6ServerLink)
	ok := WaitFor(5*time.Second, func() bool {
		addrs, _ := far.NL.AddrList(srv, unix.AF_INET6)
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("%s has no usable link-local address within 5s", LAN6ServerLink)
	}
	return &LAN6{t: t, Near: near, Far: far, Parent: parent, Router: router}
}

// Sysctl sets a sysctl of the namespace (key as sysctl(8) names it).
func (n *Netns) Sysctl(key, value string) {
	n.t.Helper()
	f := n.File()
	defer f.Close()
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", "--", "sysctl", "-q", "-w", key+"="+value)
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("sysctl %s=%s in the namespace: %v\n%s", key, value, err, out)
	}
}

// Dnsmasq6 is dnsmasq serving DHCPv6 (and RAs) on a LAN6.
type Dnsmasq6 struct {
	*Dnsmasq
}

// ServeDHCPv6 starts dnsmasq on the LAN's far end with --dhcp-range
// rng (e.g. "2001:db8:60::100,2001:db8:60::1ff,64,2m") and
// --enable-ra, and waits until it serves the range; it is killed at
// cleanup, and its output, log and lease file are logged if the test
// failed.
func (l *LAN6) ServeDHCPv6(rng string, extra ...string) *Dnsmasq6 {
	l.t.Helper()
	return &Dnsmasq6{StartDnsmasq(l.t, DnsmasqConfig{NS: l.Far, Interface: LAN6ServerLink, Dir: l.t.TempDir(), Range: rng,
		Extra: append([]string{"--enable-ra"}, extra...), Ready: "DHCPv6, IP range"})}
}

// Dnsmasq6Lease is one DHCPv6 line of dnsmasq's lease file: expiry, IAID
// (decimal there), address, hostname and the client's DUID.
type Dnsmasq6Lease struct {
	Expiry   time.Time
	IAID     uint32
	Addr     netip.Addr
	Hostname string // "*" for none
	DUID     string // hex bytes joined by colons
	Line     string
}

// Leases6 returns the lease file's DHCPv6 lines, by address.
func (d *Dnsmasq6) Leases6() []Dnsmasq6Lease {
	var out []Dnsmasq6Lease
	for _, line := range strings.Split(read(d.LeaseFile), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		exp, err1 := strconv.ParseInt(f[0], 10, 64)
		iaid, err2 := strconv.ParseUint(f[1], 10, 32)
		addr, err3 := netip.ParseAddr(f[2])
		if err1 != nil || err2 != nil || err3 != nil || !addr.Is6() {
			continue
		}
		out = append(out, Dnsmasq6Lease{Expiry: time.Unix(exp, 0), IAID: uint32(iaid), Addr: addr, Hostname: f[3], DUID: f[4], Line: line})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out
}

// Lease6 returns the lease file's line for addr.
func (d *Dnsmasq6) Lease6(addr netip.Addr) (Dnsmasq6Lease, bool) {
	for _, l := range d.Leases6() {
		if l.Addr == addr {
			return l, true
		}
	}
	return Dnsmasq6Lease{}, false
}

// WaitLease6 waits up to timeout until the lease file has a DHCPv6 line
// for addr that ok accepts (any line when ok is nil), and returns it.
// dnsmasq sends its Reply first and rewrites its lease file afterwards,
// truncating it first: a read right after the Reply may see the old file
// or an empty one. When no line is accepted in time it returns the last
// line read for addr (the zero line when there was none) and false.
func (d *Dnsmasq6) WaitLease6(timeout time.Duration, addr netip.Addr, ok func(Dnsmasq6Lease) bool) (Dnsmasq6Lease, bool) {
	return waitLine(timeout, func() (Dnsmasq6Lease, bool) { return d.Lease6(addr) }, ok)
}

// HexColons is b as dnsmasq writes client IDs and DUIDs: hex bytes
// joined by colons.
func HexColons(b []byte) string {
	s := make([]string, len(b))
	for i, x := range b {
		s[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(s, ":")
}
