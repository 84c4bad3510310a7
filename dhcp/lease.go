package dhcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Infinite is the LeaseTime (and T1, T2) of a lease the server granted
// forever (lease time 0xffffffff, RFC 2131 section 3.3): Plan never renews it.
const Infinite = time.Duration(1<<63 - 1)

// Lease is what a server's ACK granted one endpoint. Every field is
// JSON-friendly so the driver can keep it in its store and renew it after a
// restart.
type Lease struct {
	// Addr is the address with the subnet's length (yiaddr and option 1).
	Addr netip.Prefix
	// Router is the first router of option 3, if any. RFC 3442: when
	// Routes is not empty the client must ignore Router; Gateway does.
	Router netip.Addr `json:",omitzero"`
	// Routes are option 121's classless static routes, in the server's order.
	Routes []Route `json:",omitempty"`
	// DNS are option 6's name servers.
	DNS []netip.Addr `json:",omitempty"`
	// ServerID is option 54, the server that granted the lease.
	ServerID netip.Addr
	// LeaseTime, T1 and T2 are options 51, 58 and 59 (T1 and T2 default
	// to 1/2 and 7/8 of the lease time); Infinite for a lease forever.
	LeaseTime, T1, T2 time.Duration
	// Acquired is when the request that the ACK answered was first sent:
	// the lease's times count from then (RFC 2131 section 4.4.1).
	Acquired time.Time
	// Warnings say what of the ACK was dropped and why: a router or an
	// option 121 route that a container's kernel would refuse.
	Warnings []string `json:",omitempty"`
}

// Route is one classless static route of option 121 (RFC 3442). A Gateway
// of 0.0.0.0 means the destination is on the link.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// Gateway is the default gateway of the lease: the gateway of a 0.0.0.0/0
// route of option 121 when the server sent that option (RFC 3442 has the
// client ignore option 3 then), else Router. It is the zero Addr when the
// lease has none.
func (l Lease) Gateway() netip.Addr {
	if len(l.Routes) == 0 {
		return l.Router
	}
	for _, r := range l.Routes {
		if r.Dst.Bits() == 0 && r.Gateway.IsValid() && !r.Gateway.IsUnspecified() {
			return r.Gateway
		}
	}
	return netip.Addr{}
}

// MinLeaseTime is the shortest lease taken: an OFFER or ACK of a shorter
// one (lease time 0 included) is refused, since it would expire before it
// could be renewed in time, and a renewal of it is an error.
const MinLeaseTime = 10 * time.Second

// leaseFromACK reads a lease out of an ACK. acquired is when the request
// was first sent. It refuses an ACK without a usable address, server ID,
// mask of /8 or longer, or lease time of MinLeaseTime or more; a refused
// address is a *badAddress. Routers and option 121 routes that a
// container's kernel would refuse are dropped, each with a Warning.
func leaseFromACK(ack *dhcpv4.DHCPv4, acquired time.Time) (Lease, error) {
	var l Lease
	addr, ok := addr4(ack.YourIPAddr)
	if !ok || addr.IsUnspecified() {
		return l, fmt.Errorf("the ACK has no usable address (yiaddr %v)", ack.YourIPAddr)
	}
	bits, err := maskBits(ack, addr)
	if err != nil {
		return l, err
	}
	l.Addr = netip.PrefixFrom(addr, bits)
	l.ServerID, ok = addr4(ack.ServerIdentifier())
	if !ok || l.ServerID.IsUnspecified() {
		return l, fmt.Errorf("the ACK for %s has no server identifier (option 54)", addr)
	}
	if err := checkAddress(addr, bits, l.ServerID); err != nil {
		return l, err
	}
	for _, r := range ack.Router() {
		a, ok := addr4(r)
		if !ok || a.IsUnspecified() {
			continue
		}
		if why := badGateway(l.Addr, a); why != "" {
			l.Warnings = append(l.Warnings, fmt.Sprintf("dropped router %s (option 3): it is %s", a, why))
			continue
		}
		l.Router = a
		break
	}
	connected, seen := l.Addr.Masked(), map[netip.Prefix]bool{}
	for _, r := range ack.ClasslessStaticRoute() {
		gw, ok := addr4(r.Router)
		dst, ok2 := addr4(r.Dest.IP)
		if !ok || !ok2 {
			continue
		}
		ones, _ := r.Dest.Mask.Size()
		p := netip.PrefixFrom(dst, ones).Masked()
		var why string
		switch {
		case p == connected:
			why = "the connected subnet, which the address already routes"
		case seen[p]:
			why = "a second route to the same destination"
		case !gw.IsUnspecified() && badGateway(l.Addr, gw) != "":
			why = "via " + badGateway(l.Addr, gw)
		}
		if why != "" {
			l.Warnings = append(l.Warnings, fmt.Sprintf("dropped route %s via %s (option 121): %s", p, gw, why))
			continue
		}
		seen[p] = true
		l.Routes = append(l.Routes, Route{Dst: p, Gateway: gw})
	}
	for _, d := range ack.DNS() {
		if a, ok := addr4(d); ok {
			l.DNS = append(l.DNS, a)
		}
	}
	l.LeaseTime, ok = seconds(ack, dhcpv4.OptionIPAddressLeaseTime)
	if !ok {
		return l, fmt.Errorf("the ACK for %s has no lease time (option 51)", addr)
	}
	if l.LeaseTime < MinLeaseTime {
		return l, fmt.Errorf("the lease of %s is for %s (option 51), under the %s this client takes: make the server's leases longer", addr, l.LeaseTime, MinLeaseTime)
	}
	l.T1, l.T2 = l.LeaseTime/2, l.LeaseTime/8*7
	if l.LeaseTime == Infinite {
		l.T1, l.T2 = Infinite, Infinite
	}
	// T1 and T2 of 0, under a second, or not before the expiry are
	// ignored (RFC 2131 section 4.4.5: 0 < T1 < T2 < lease time).
	if t, ok := seconds(ack, dhcpv4.OptionRenewTimeValue); ok && t >= time.Second && t < l.LeaseTime {
		l.T1 = t
	}
	if t, ok := seconds(ack, dhcpv4.OptionRebindingTimeValue); ok && t >= time.Second && t < l.LeaseTime {
		l.T2 = t
	}
	if l.T1 > l.T2 {
		l.T1 = l.T2
	}
	l.Acquired = acquired
	return l, nil
}

// checkOffer refuses an OFFER whose address, mask or (when it says one)
// lease time leaseFromACK would refuse in the ACK.
func checkOffer(m *dhcpv4.DHCPv4, addr, server netip.Addr) error {
	bits, err := maskBits(m, addr)
	if err != nil {
		return err
	}
	if err := checkAddress(addr, bits, server); err != nil {
		return err
	}
	if t, ok := seconds(m, dhcpv4.OptionIPAddressLeaseTime); ok && t < MinLeaseTime {
		return fmt.Errorf("the lease of %s is for %s (option 51), under the %s this client takes: make the server's leases longer", addr, t, MinLeaseTime)
	}
	return nil
}

// badAddress is an offered or acknowledged address no endpoint may use;
// the client declines it.
type badAddress struct {
	addr netip.Addr
	why  string
}

func (e *badAddress) Error() string { return fmt.Sprintf("%s is %s", e.addr, e.why) }

// special are the ranges no endpoint's address or gateway may be in.
var special = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "in 0.0.0.0/8 (\"this network\", RFC 1122)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "in the reserved 240.0.0.0/4 (with the broadcast address)"},
}

var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// checkAddress refuses an address in a special range, link-local, the
// subnet's network or broadcast address, or the server's own.
func checkAddress(addr netip.Addr, bits int, server netip.Addr) error {
	for _, s := range special {
		if s.p.Contains(addr) {
			return &badAddress{addr, s.why}
		}
	}
	switch {
	case linkLocal.Contains(addr):
		return &badAddress{addr, "a link-local address (169.254.0.0/16), which no DHCP server may lease (RFC 3927)"}
	case addr == server:
		return &badAddress{addr, "the server's own address (option 54)"}
	}
	if why := edge(netip.PrefixFrom(addr, bits), addr); why != "" {
		return &badAddress{addr, why}
	}
	return nil
}

// badGateway says why a is no gateway for the address p: a special
// address, p's own, or its subnet's network or broadcast address; "" when
// it is fine (a gateway outside the subnet is left to the caller).
func badGateway(p netip.Prefix, a netip.Addr) string {
	for _, s := range special {
		if s.p.Contains(a) {
			return s.why
		}
	}
	if a == p.Addr() {
		return "the leased address itself"
	}
	return edge(p, a)
}

// edge says whether a is the network or broadcast address of p's subnet
// (a /31 and a /32 have neither, RFC 3021).
func edge(p netip.Prefix, a netip.Addr) string {
	if p.Bits() > 30 || !p.Masked().Contains(a) {
		return ""
	}
	n := p.Masked().Addr()
	b := n.As4()
	v := binary.BigEndian.Uint32(b[:]) | (1<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(b[:], v)
	switch a {
	case n:
		return "the network address of its subnet " + p.Masked().String()
	case netip.AddrFrom4(b):
		return "the broadcast address of its subnet " + p.Masked().String()
	}
	return ""
}

// maskBits is the prefix length of option 1, or the address class's when
// the server sent none (RFC 2131 leaves the client to choose).
func maskBits(ack *dhcpv4.DHCPv4, addr netip.Addr) (int, error) {
	raw := ack.Options.Get(dhcpv4.OptionSubnetMask)
	if raw == nil {
		switch b := addr.As4()[0]; {
		case b < 128:
			return 8, nil
		case b < 192:
			return 16, nil
		default:
			return 24, nil
		}
	}
	ones, size := net.IPMask(raw).Size()
	if len(raw) != 4 || size != 32 {
		return 0, fmt.Errorf("the ACK for %s has an invalid subnet mask %v (option 1 must be 4 bytes of contiguous ones)", addr, net.IP(raw))
	}
	if ones < 8 {
		return 0, fmt.Errorf("the subnet mask for %s is /%d (option 1): masks below /8 are refused (a route to that much of the Internet through the LAN is a server's mistake)", addr, ones)
	}
	return ones, nil
}

// seconds reads a 32-bit time option; 0xffffffff is Infinite.
func seconds(m *dhcpv4.DHCPv4, code dhcpv4.OptionCode) (time.Duration, bool) {
	v := m.Options.Get(code)
	if len(v) != 4 {
		return 0, false
	}
	s := binary.BigEndian.Uint32(v)
	if s == 0xffffffff {
		return Infinite, true
	}
	return time.Duration(s) * time.Second, true
}

func addr4(ip net.IP) (netip.Addr, bool) {
	ip4 := ip.To4()
	if ip4 == nil {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(ip4)), true
}

// keep fills what a renewal's ACK left out with the old lease's values:
// some servers send only what the request asked for, or less.
func keep(n, old Lease, ack *dhcpv4.DHCPv4) Lease {
	if ack.Options.Get(dhcpv4.OptionSubnetMask) == nil {
		n.Addr = netip.PrefixFrom(n.Addr.Addr(), old.Addr.Bits())
	}
	if ack.Options.Get(dhcpv4.OptionRouter) == nil {
		n.Router = old.Router
	}
	if ack.Options.Get(dhcpv4.OptionClasslessStaticRoute) == nil {
		n.Routes = old.Routes
	}
	if ack.Options.Get(dhcpv4.OptionDomainNameServer) == nil {
		n.DNS = old.DNS
	}
	return n
}
