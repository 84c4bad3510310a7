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

// leaseFromACK reads a lease out of an ACK. acquired is when the request
// was first sent. It refuses an ACK without a usable address or server ID.
func leaseFromACK(ack *dhcpv4.DHCPv4, acquired time.Time) (Lease, error) {
	var l Lease
	addr, ok := addr4(ack.YourIPAddr)
	if !ok || addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
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
	for _, r := range ack.Router() {
		if a, ok := addr4(r); ok && !a.IsUnspecified() {
			l.Router = a
			break
		}
	}
	for _, r := range ack.ClasslessStaticRoute() {
		gw, ok := addr4(r.Router)
		dst, ok2 := addr4(r.Dest.IP)
		bits, _ := r.Dest.Mask.Size()
		if ok && ok2 {
			l.Routes = append(l.Routes, Route{Dst: netip.PrefixFrom(dst, bits).Masked(), Gateway: gw})
		}
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
	l.T1, l.T2 = l.LeaseTime/2, l.LeaseTime/8*7
	if l.LeaseTime == Infinite {
		l.T1, l.T2 = Infinite, Infinite
	}
	if t, ok := seconds(ack, dhcpv4.OptionRenewTimeValue); ok && t <= l.LeaseTime {
		l.T1 = t
	}
	if t, ok := seconds(ack, dhcpv4.OptionRebindingTimeValue); ok && t <= l.LeaseTime {
		l.T2 = t
	}
	if l.T1 > l.T2 { // RFC 2131 section 4.4.5: T1 < T2 < lease time
		l.T1 = l.T2
	}
	l.Acquired = acquired
	return l, nil
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
