package itest

// A test LAN behind a switch, for the LAN preflight's tests
// (`underlay doctor --lan`, test/integration/lancheck_test.go): a
// namespace of the switch's own holding a Linux bridge; the parent, in
// the test's near namespace, is one end of a veth whose other end is a
// port of that bridge; further ports lead to hosts, each in a namespace
// of its own: a gateway, dnsmasq as DHCP server and router (RAs,
// DHCPv6), a second (rogue) DHCP server. The switch can enforce port
// security on the parent's port (an nftables rule in the bridge family
// that drops every frame from a source MAC other than the parent's, as a
// switch with port security or a hypervisor rejecting new MACs does), and
// a capture on the switch's side of that port sees what the near side
// sends.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// SwitchBridge is the bridge's name in the switch's namespace.
const SwitchBridge = "sw0"

// SwitchLAN is a test LAN behind a switch: Parent, in Near, is one end
// of a veth whose other end Port is a port of the bridge in Switch.
type SwitchLAN struct {
	t      testing.TB
	Near   *Netns
	Switch *Netns
	Parent string
	// ParentMAC is the parent's MAC, the only source port security lets
	// through Port.
	ParentMAC net.HardwareAddr
	// Port is the parent's port on the switch, in Switch.
	Port string
	// Net4 is 198.18.N.0/24 and Net6 2001:db8:N::/64: the hosts' subnets.
	Net4, Net6 netip.Prefix

	mu    sync.Mutex
	hosts []*LANHost
}

// LANHost is a host on a SwitchLAN: Link ("eth0") in NS, its port Port on
// the switch, with Addr4 and Addr6 (no duplicate address detection).
type LANHost struct {
	lan          *SwitchLAN
	Name         string
	NS           *Netns
	Link         string
	Port         string
	MAC          net.HardwareAddr
	Addr4, Addr6 netip.Prefix
	index        int
}

// LANHostLink is a host's link to the switch, in its namespace.
const LANHostLink = "eth0"

// NewSwitchLAN makes the switch (a bridge without multicast snooping in
// a namespace with IPv6 off, so that the switch itself sends nothing),
// and parent (MTU 1500, up, no duplicate address detection, so that its
// link-local address is usable at once) in near as its first port. n
// picks the subnets 198.18.n.0/24 and 2001:db8:n::/64 (1 to 255).
func NewSwitchLAN(t testing.TB, near *Netns, parent string, n int) *SwitchLAN {
	t.Helper()
	if n < 1 || n > 255 {
		t.Fatalf("NewSwitchLAN: subnet number %d is not within 1..255", n)
	}
	sw := NewNetns(t)
	sw.Sysctl("net.ipv6.conf.default.disable_ipv6", "1")
	sw.Sysctl("net.ipv6.conf.all.disable_ipv6", "1")
	off := false
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: SwitchBridge, MTU: 9000}, MulticastSnooping: &off}
	if err := sw.NL.LinkAdd(br); err != nil {
		t.Fatalf("add bridge %s in the switch's namespace: %v", SwitchBridge, err)
	}
	sw.Up(SwitchBridge)
	l := &SwitchLAN{t: t, Near: near, Switch: sw, Parent: parent, Port: portName("near"),
		Net4: netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", n)),
		Net6: netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x::/64", n))}
	l.ParentMAC = l.plug(near, parent, l.Port, 1500)
	return l
}

// portName is the switch's port for a host (at most 15 bytes).
func portName(host string) string {
	p := "pt-" + host
	if len(p) > 15 {
		p = p[:15]
	}
	return p
}

// plug makes the veth name (in ns, up, no DAD) and its peer port (in the
// switch, a bridge port, up) and returns name's MAC.
func (l *SwitchLAN) plug(ns *Netns, name, port string, mtu int) net.HardwareAddr {
	l.t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, PeerName: port, PeerNamespace: netlink.NsFd(int(l.Switch.Handle()))}
	if err := ns.NL.LinkAdd(v); err != nil {
		l.t.Fatalf("add veth %s with its peer %s on the switch: %v", name, port, err)
	}
	p := l.Switch.MustLink(port)
	if err := l.Switch.NL.LinkSetMTU(p, 9000); err != nil {
		l.t.Fatalf("MTU of port %s: %v", port, err)
	}
	if err := l.Switch.NL.LinkSetMaster(p, l.Switch.MustLink(SwitchBridge)); err != nil {
		l.t.Fatalf("port %s into bridge %s: %v", port, SwitchBridge, err)
	}
	l.Switch.Up(port)
	ns.Sysctl("net.ipv6.conf."+name+".accept_dad", "0")
	ns.Up(name)
	link := ns.MustLink(name)
	if !WaitFor(5*time.Second, func() bool { return linkLocalReady(ns, link) }) {
		l.t.Fatalf("%s has no usable link-local address within 5s", name)
	}
	return link.Attrs().HardwareAddr
}

func linkLocalReady(ns *Netns, link netlink.Link) bool {
	addrs, _ := ns.NL.AddrList(link, unix.AF_INET6)
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
			return true
		}
	}
	return false
}

// Host plugs a new host into the switch: a namespace of its own with
// LANHostLink holding 198.18.N.id/24 and 2001:db8:N::id/64 (id in hex
// there), forwarding on (a router: dnsmasq's RAs then carry a router
// lifetime). name is at most 12 bytes.
func (l *SwitchLAN) Host(name string, id int) *LANHost {
	l.t.Helper()
	if id < 1 || id > 254 {
		l.t.Fatalf("host %s: id %d is not within 1..254 (2 is the parent's, when it has addresses)", name, id)
	}
	ns := NewNetns(l.t)
	ns.Sysctl("net.ipv6.conf.default.accept_dad", "0")
	ns.Sysctl("net.ipv6.conf.all.forwarding", "1")
	ns.Sysctl("net.ipv4.ip_forward", "1")
	h := &LANHost{lan: l, Name: name, NS: ns, Link: LANHostLink, Port: portName(name),
		Addr4: l.Addr4(id), Addr6: l.Addr6(id)}
	h.MAC = l.plug(ns, LANHostLink, h.Port, 1500)
	link := ns.MustLink(LANHostLink)
	for _, a := range []netip.Prefix{h.Addr4, h.Addr6} {
		if err := ns.NL.AddrAdd(link, nlAddr(a)); err != nil {
			l.t.Fatalf("address %s on host %s: %v", a, name, err)
		}
	}
	l.mu.Lock()
	h.index = len(l.hosts)
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	return h
}

// Gateway plugs in the LAN's gateway: Host("gw", 1), 198.18.N.1 and
// 2001:db8:N::1.
func (l *SwitchLAN) Gateway() *LANHost {
	l.t.Helper()
	return l.Host("gw", 1)
}

// Addr4 is 198.18.N.id/24, Addr6 2001:db8:N::id/64 (id in hex).
func (l *SwitchLAN) Addr4(id int) netip.Prefix {
	a := l.Net4.Addr().As4()
	a[3] = byte(id)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24)
}

// Addr6 is 2001:db8:N::id/64 (id in hex).
func (l *SwitchLAN) Addr6(id int) netip.Prefix {
	a := l.Net6.Addr().As16()
	binary.BigEndian.PutUint16(a[14:], uint16(id))
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

func nlAddr(p netip.Prefix) *netlink.Addr {
	bits := 32
	var flags int
	if p.Addr().Is6() {
		bits, flags = 128, unix.IFA_F_NODAD
	}
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}, Flags: flags}
}

// HostMACs are the MACs of every host plugged in so far: what is not
// theirs on the switch came from the near side.
func (l *SwitchLAN) HostMACs() []net.HardwareAddr {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []net.HardwareAddr
	for _, h := range l.hosts {
		out = append(out, h.MAC)
	}
	return out
}

// ParentAddrs gives the parent 198.18.N.2/24 and 2001:db8:N::2/64 and
// the near namespace default routes through it via gw4 and gw6 (either
// may be invalid: no route of that family): a host whose default route
// is through the parent.
func (l *SwitchLAN) ParentAddrs(gw4, gw6 netip.Addr) {
	l.t.Helper()
	link := l.Near.MustLink(l.Parent)
	for _, a := range []netip.Prefix{l.Addr4(2), l.Addr6(2)} {
		if err := l.Near.NL.AddrAdd(link, nlAddr(a)); err != nil {
			l.t.Fatalf("address %s on the parent %s: %v", a, l.Parent, err)
		}
	}
	for _, gw := range []netip.Addr{gw4, gw6} {
		if !gw.IsValid() {
			continue
		}
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}
		if err := l.Near.NL.RouteAdd(r); err != nil {
			l.t.Fatalf("default route via %s through %s: %v", gw, l.Parent, err)
		}
	}
}

// SetParentMTU sets the parent's MTU (the switch's ports carry 9000).
func (l *SwitchLAN) SetParentMTU(mtu int) {
	l.t.Helper()
	if err := l.Near.NL.LinkSetMTU(l.Near.MustLink(l.Parent), mtu); err != nil {
		l.t.Fatalf("MTU %d on %s: %v", mtu, l.Parent, err)
	}
}

// ParentDown sets the parent down.
func (l *SwitchLAN) ParentDown() {
	l.t.Helper()
	if err := l.Near.NL.LinkSetDown(l.Near.MustLink(l.Parent)); err != nil {
		l.t.Fatalf("set %s down: %v", l.Parent, err)
	}
}

// Capture records every frame of the parent's port, on the switch's side:
// what the near side sends (and what it is sent), before port security.
func (l *SwitchLAN) Capture() *Capture {
	l.t.Helper()
	return StartCapture(l.t, l.Switch, l.Port)
}

// FromNear keeps the frames whose Ethernet source is no host's: what the
// near side sent (the switch itself sends nothing).
func (l *SwitchLAN) FromNear(c *Capture) []Frame {
	hosts := l.HostMACs()
	return c.Match(func(b []byte) bool {
		if len(b) < 14 {
			return true
		}
		for _, m := range hosts {
			if bytes.Equal(b[6:12], m) {
				return false
			}
		}
		return true
	})
}

// PortSecurity is the switch's port security on the parent's port.
type PortSecurity struct {
	l     *SwitchLAN
	table *nftables.Table
	chain *nftables.Chain
}

// portSecurityTable is the nftables table (bridge family) of the rule.
const portSecurityTable = "portsec"

// PortSecurity makes the switch drop every frame that arrives on the
// parent's port from an Ethernet source other than the parent's MAC: an
// nftables rule in the bridge family (prerouting, before the bridge
// learns or forwards), with a counter of what it dropped.
func (l *SwitchLAN) PortSecurity() *PortSecurity {
	l.t.Helper()
	ps := &PortSecurity{l: l, table: &nftables.Table{Family: nftables.TableFamilyBridge, Name: portSecurityTable}}
	accept := nftables.ChainPolicyAccept
	ps.chain = &nftables.Chain{Name: "prerouting", Table: ps.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-200), Policy: &accept}
	err := l.nft(func(c *nftables.Conn) error {
		c.AddTable(ps.table)
		c.AddChain(ps.chain)
		c.AddRule(&nftables.Rule{Table: ps.table, Chain: ps.chain, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(l.Port)},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(l.ParentMAC)},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
		return c.Flush()
	})
	if err != nil {
		l.t.Fatalf("port security on %s (nftables, bridge family, in the switch's namespace): %v", l.Port, err)
	}
	return ps
}

// Dropped is how many frames port security dropped so far.
func (ps *PortSecurity) Dropped() uint64 {
	ps.l.t.Helper()
	var n uint64
	err := ps.l.nft(func(c *nftables.Conn) error {
		rules, err := c.GetRules(ps.table, ps.chain)
		if err != nil {
			return err
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					n += ctr.Packets
				}
			}
		}
		return nil
	})
	if err != nil {
		ps.l.t.Fatalf("read port security's counter: %v", err)
	}
	return n
}

func (l *SwitchLAN) nft(op func(c *nftables.Conn) error) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(l.Switch.Handle())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	return op(c)
}

// ifname is an interface name as nftables compares it (IFNAMSIZ bytes,
// NUL-padded).
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// LANDnsmasq says what dnsmasq serves on a host of a SwitchLAN.
type LANDnsmasq struct {
	// V4 serves DHCPv4: a range of ten addresses of its own per host
	// (198.18.N.100+10k..109+10k for the LAN's k-th host), leases of 2
	// minutes, option 3 Router (the host itself when invalid).
	V4     bool
	Router netip.Addr
	// V6 is "" (no IPv6), "ra-only" (RAs, neither M nor O, no DHCPv6),
	// "slaac" (RAs with an autonomous prefix) or "dhcpv6" (RAs with M and
	// a DHCPv6 range 2001:db8:N::100+100k..1ff+100k).
	V6 string
}

// Dnsmasq starts dnsmasq on the host (--enable-ra for IPv6, --no-ping)
// and waits until it serves; it is killed at cleanup.
func (h *LANHost) Dnsmasq(c LANDnsmasq) *Dnsmasq {
	h.lan.t.Helper()
	var ranges []string
	ready := ""
	extra := []string{"--no-ping"}
	if c.V4 {
		lo := h.lan.Addr4(100 + 10*h.index).Addr()
		hi := h.lan.Addr4(109 + 10*h.index).Addr()
		ranges = append(ranges, fmt.Sprintf("%s,%s,255.255.255.0,2m", lo, hi))
		ready = "DHCP, IP range"
		router := c.Router
		if !router.IsValid() {
			router = h.Addr4.Addr()
		}
		extra = append(extra, "--dhcp-option=3,"+router.String())
	}
	prefix := h.lan.Net6.Addr().String()
	switch c.V6 {
	case "":
	case "ra-only", "slaac":
		ranges = append(ranges, prefix+","+c.V6)
		if ready == "" {
			ready = "IPv6 router advertisement enabled"
		}
	case "dhcpv6":
		lo := h.lan.Addr6(0x100 + 0x100*h.index).Addr()
		hi := h.lan.Addr6(0x1ff + 0x100*h.index).Addr()
		ranges = append(ranges, fmt.Sprintf("%s,%s,64,2m", lo, hi))
		if ready == "" {
			ready = "DHCPv6, IP range"
		}
	default:
		h.lan.t.Fatalf("dnsmasq on %s: V6 %q is not \"\", ra-only, slaac or dhcpv6", h.Name, c.V6)
	}
	if len(ranges) == 0 {
		h.lan.t.Fatalf("dnsmasq on %s serves nothing: set V4 or V6", h.Name)
	}
	if c.V6 != "" {
		extra = append(extra, "--enable-ra")
	}
	for _, r := range ranges[1:] {
		extra = append(extra, "--dhcp-range="+r)
	}
	return StartDnsmasq(h.lan.t, DnsmasqConfig{NS: h.NS, Interface: h.Link, Dir: h.lan.t.TempDir(),
		Range: ranges[0], Extra: extra, Ready: ready})
}

// RunIn runs bin with args in ns (this test binary re-executes itself
// into ns and then bin: Main serves it) with env added, kills it after
// limit, and returns its output and exit code (-1 when it was killed or
// could not run).
func RunIn(t testing.TB, ns *Netns, limit time.Duration, env []string, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{bin}, args...)...)
	cmd.Env = append(append(os.Environ(), envExecInNetns+"=1"), env...)
	f := ns.File()
	defer f.Close()
	cmd.ExtraFiles = []*os.File{f}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case ctx.Err() != nil:
		t.Errorf("%s %v did not end within %s", filepath.Base(bin), args, limit)
		return out.String(), errOut.String(), -1
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	}
	t.Errorf("run %s %v: %v", bin, args, err)
	return out.String(), errOut.String(), -1
}

// LinksWithMAC returns the links (as "namespace: name") holding mac in
// every network namespace this process can reach: /run/netns, and every
// process's threads' namespaces and open namespace descriptors. Best
// effort: an anonymous namespace held by nothing reachable is not seen.
func LinksWithMAC(mac net.HardwareAddr) []string {
	var paths []string
	if names, err := os.ReadDir("/run/netns"); err == nil {
		for _, n := range names {
			paths = append(paths, filepath.Join("/run/netns", n.Name()))
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "task"))
		for _, task := range tasks {
			paths = append(paths, filepath.Join("/proc", p.Name(), "task", task.Name(), "ns", "net"))
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(target, "net:[") {
				paths = append(paths, filepath.Join(fdDir, fd.Name()))
			}
		}
	}
	seen := map[uint64]bool{}
	var out []string
	for _, path := range paths {
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil || seen[st.Ino] {
			continue
		}
		seen[st.Ino] = true
		h, err := netns.GetFromPath(path)
		if err != nil {
			continue
		}
		nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
		if err != nil {
			h.Close()
			continue
		}
		links, _ := nl.LinkList()
		for _, l := range links {
			if bytes.Equal(l.Attrs().HardwareAddr, mac) {
				out = append(out, fmt.Sprintf("net:[%d] (%s): %s", st.Ino, path, l.Attrs().Name))
			}
		}
		nl.Close()
		h.Close()
	}
	return out
}

// Wire is what an Ethernet frame is, as the LAN preflight's wire test
// tells frames apart.
type Wire struct {
	// Kind is "arp", "icmpv6", "dhcp", "dhcpv6", "ipv4", "ipv6" or
	// "ethernet" (any other EtherType).
	Kind string
	// Type is the ARP op, the ICMPv6 type, the DHCP message type (option
	// 53), the DHCPv6 message type, the IPv4/IPv6 protocol (after IPv6's
	// hop-by-hop options) or the EtherType.
	Type int
	// ARP is the ARP frame's fields (Kind arp).
	ARP ARP
	// Src and Dst are the Ethernet addresses.
	Src, Dst net.HardwareAddr
	// Detail says the rest, for messages.
	Detail string
}

func (w Wire) String() string {
	return fmt.Sprintf("%s %d from %s to %s %s", w.Kind, w.Type, w.Src, w.Dst, w.Detail)
}

// ReadWire tells what an Ethernet frame is.
func ReadWire(b []byte) Wire {
	if len(b) < 14 {
		return Wire{Kind: "ethernet", Detail: fmt.Sprintf("runt of %d bytes", len(b))}
	}
	w := Wire{Src: b[6:12], Dst: b[0:6]}
	et := binary.BigEndian.Uint16(b[12:14])
	p := b[14:]
	switch et {
	case unix.ETH_P_ARP:
		a, ok := ReadARP(b)
		if !ok {
			w.Kind, w.Type, w.Detail = "ethernet", int(et), "malformed ARP"
			return w
		}
		w.Kind, w.Type, w.ARP = "arp", int(a.Op), a
		w.Detail = fmt.Sprintf("sender %s %s target %s %s", a.SHA, a.SPA, a.THA, a.TPA)
	case unix.ETH_P_IP:
		if len(p) < 20 {
			w.Kind, w.Detail = "ipv4", "truncated"
			return w
		}
		ihl := int(p[0]&0x0f) * 4
		w.Kind, w.Type = "ipv4", int(p[9])
		src, dst := netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		w.Detail = fmt.Sprintf("%s -> %s", src, dst)
		if p[9] == unix.IPPROTO_UDP && len(p) >= ihl+8 {
			sp, dp := binary.BigEndian.Uint16(p[ihl:]), binary.BigEndian.Uint16(p[ihl+2:])
			w.Detail += fmt.Sprintf(" udp %d->%d", sp, dp)
			if sp == 68 && dp == 67 {
				w.Kind, w.Type = "dhcp", 0
				if m, err := dhcpv4.FromBytes(p[ihl+8:]); err == nil {
					w.Type = int(m.MessageType())
					w.Detail += " " + m.MessageType().String()
				}
			}
		}
	case unix.ETH_P_IPV6:
		if len(p) < 40 {
			w.Kind, w.Detail = "ipv6", "truncated"
			return w
		}
		next, off := p[6], 40
		if next == 0 && len(p) >= off+8 { // hop-by-hop options (MLD's router alert)
			next, off = p[off], off+8*(int(p[off+1])+1)
		}
		src, dst := netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		w.Kind, w.Type, w.Detail = "ipv6", int(next), fmt.Sprintf("%s -> %s", src, dst)
		switch {
		case next == unix.IPPROTO_ICMPV6 && len(p) > off:
			w.Kind, w.Type = "icmpv6", int(p[off])
		case next == unix.IPPROTO_UDP && len(p) >= off+9:
			sp, dp := binary.BigEndian.Uint16(p[off:]), binary.BigEndian.Uint16(p[off+2:])
			w.Detail += fmt.Sprintf(" udp %d->%d", sp, dp)
			if sp == 546 && dp == 547 {
				w.Kind, w.Type = "dhcpv6", int(p[off+8])
			}
		}
	default:
		w.Kind, w.Type = "ethernet", int(et)
	}
	return w
}
