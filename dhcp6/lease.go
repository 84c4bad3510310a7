package dhcp6

import (
	"bytes"
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// Infinite is a lifetime (or T1, T2) of 0xffffffff, "forever" (RFC 8415
// section 7.7): Plan never renews past it.
const Infinite = time.Duration(1<<63 - 1)

// MinLifetime is the shortest valid lifetime taken: an address valid for
// less (0 included) is refused, since it would expire before it could be
// renewed in time.
const MinLifetime = 10 * time.Second

// Lease is one address (IA_NA) a server granted one endpoint. Every field
// is JSON-friendly so the driver can keep it in its store and renew it
// after a restart.
type Lease struct {
	// Addr is the leased address. DHCPv6 gives no prefix length: the
	// on-link prefix is the router advertisements' (or the network's
	// subnet); without one the address is a /128.
	Addr netip.Addr
	// Preferred and Valid are the address's lifetimes (Infinite for
	// ever): deprecated after Preferred, gone after Valid.
	Preferred, Valid time.Duration
	// T1 and T2 are when to Renew and Rebind, after Acquired.
	T1, T2 time.Duration
	// IAID is the IA_NA's, as in the Request.
	IAID [4]byte
	// ServerID is the DUID of the server that granted the lease, as on
	// the wire; Renew, Release and Decline address it.
	ServerID []byte
	// DNS are option 23's recursive name servers.
	DNS []netip.Addr `json:",omitempty"`
	// Acquired is when the message the Reply answered was first sent:
	// the lease's times count from then.
	Acquired time.Time
	// Warnings say what of the Reply was changed or dropped and why.
	Warnings []string `json:",omitempty"`
}

// badAddress says why a is no address for an endpoint, or "".
func badAddress(a netip.Addr) string {
	switch {
	case !a.Is6():
		return "not an IPv6 address"
	case a.Is4In6():
		return "an IPv4-mapped address (::ffff:0:0/96)"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "the loopback address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case reserved.Contains(a):
		return "in ::/8, reserved (RFC 4291 section 2.4)"
	case siteLocal.Contains(a):
		return "a deprecated site-local address (fec0::/10, RFC 3879)"
	case !a.IsGlobalUnicast():
		return "not a global unicast address"
	}
	return ""
}

var (
	reserved  = netip.MustParsePrefix("::/8")
	siteLocal = netip.MustParsePrefix("fec0::/10")
)

// refusal is a reply's IA_NA or address the client does not take. addr
// is set when the address itself is unusable (it is declined).
type refusal struct {
	addr netip.Addr
	why  string
}

func (e *refusal) Error() string { return e.why }

// statusError is a status code other than Success, in a message or an
// IA_NA.
type statusError struct {
	code iana.StatusCode
	msg  string
	in   string // "the reply" or "the IA_NA"
}

func (e *statusError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("%s says %s (status %d)", e.in, e.code, e.code)
	}
	return fmt.Sprintf("%s says %s (status %d: %q)", e.in, e.code, e.code, e.msg)
}

// status is the error of a status code option, nil for none or Success.
func status(s *dhcpv6.OptStatusCode, in string) *statusError {
	if s == nil || s.StatusCode == iana.StatusSuccess {
		return nil
	}
	return &statusError{code: s.StatusCode, msg: s.StatusMessage, in: in}
}

// ianaOf returns the message's IA_NA with iaid, or nil.
func ianaOf(m *dhcpv6.Message, iaid [4]byte) *dhcpv6.OptIANA {
	for _, ia := range m.Options.IANA() {
		if ia.IaId == iaid {
			return ia
		}
	}
	return nil
}

// leaseFrom reads the lease for the request's IA_NA out of an Advertise
// or a Reply. want, if valid, is the address that must be in it (a
// renewal's); else the first usable one is taken. Status codes are a
// *statusError, an IA_NA or address that is not taken a *refusal.
func leaseFrom(m *dhcpv6.Message, iaid [4]byte, want netip.Addr, acquired time.Time) (Lease, error) {
	if err := status(m.Options.Status(), "the "+m.MessageType.String()); err != nil {
		return Lease{}, err
	}
	ia := ianaOf(m, iaid)
	if ia == nil {
		return Lease{}, &refusal{why: fmt.Sprintf("the %s has no IA_NA with IAID %x", m.MessageType, iaid)}
	}
	if err := status(ia.Options.Status(), "the IA_NA"); err != nil {
		return Lease{}, err
	}
	sid := m.Options.ServerID()
	if sid == nil {
		return Lease{}, &refusal{why: fmt.Sprintf("the %s has no server identifier (option 2)", m.MessageType)}
	}
	l := Lease{IAID: iaid, ServerID: sid.ToBytes(), Acquired: acquired}
	var first error
	for _, a := range ia.Options.Addresses() {
		addr, ok := netip.AddrFromSlice(a.IPv6Addr)
		if !ok {
			continue
		}
		if want.IsValid() && addr != want {
			continue
		}
		why := ""
		switch {
		case badAddress(addr) != "":
			why = fmt.Sprintf("%s is %s", addr, badAddress(addr))
		case status(a.Options.Status(), "the address") != nil:
			why = fmt.Sprintf("%s: %s", addr, status(a.Options.Status(), "the address"))
		case lifetime(a.ValidLifetime) < MinLifetime:
			why = fmt.Sprintf("%s is valid for %s, under the %s this client takes: make the server's lifetimes longer", addr, a.ValidLifetime, MinLifetime)
		case lifetime(a.PreferredLifetime) > lifetime(a.ValidLifetime):
			why = fmt.Sprintf("%s has a preferred lifetime (%s) over its valid lifetime (%s), which RFC 8415 section 21.6 has clients discard", addr, a.PreferredLifetime, a.ValidLifetime)
		}
		if why != "" {
			if first == nil {
				r := &refusal{why: why}
				if badAddress(addr) != "" {
					r.addr = addr
				}
				first = r
			}
			continue
		}
		l.Addr, l.Preferred, l.Valid = addr, lifetime(a.PreferredLifetime), lifetime(a.ValidLifetime)
		break
	}
	if !l.Addr.IsValid() {
		if first != nil {
			return Lease{}, first
		}
		if want.IsValid() {
			return Lease{}, &refusal{why: fmt.Sprintf("the IA_NA with IAID %x does not hold %s", iaid, want)}
		}
		return Lease{}, &refusal{why: fmt.Sprintf("the IA_NA with IAID %x holds no address", iaid)}
	}
	t1, t2 := lifetime(ia.T1), lifetime(ia.T2)
	if t1 > 0 && t2 > 0 && t1 > t2 {
		return Lease{}, &refusal{why: fmt.Sprintf("the IA_NA with IAID %x has T1 %s after T2 %s, which RFC 8415 section 21.4 has clients discard", iaid, ia.T1, ia.T2)}
	}
	l.T1, l.T2, l.Warnings = times(t1, t2, l.Preferred, l.Valid)
	for _, d := range m.Options.DNS() {
		if a, ok := netip.AddrFromSlice(d); ok && a.Is6() && !a.IsUnspecified() && !a.IsMulticast() {
			l.DNS = append(l.DNS, a)
		}
	}
	return l, nil
}

// lifetime reads a lifetime the library decoded: 0xffffffff s is Infinite.
func lifetime(d time.Duration) time.Duration {
	if d >= 0xffffffff*time.Second {
		return Infinite
	}
	return d
}

// times makes T1 and T2 usable: 0 (left to the client, RFC 8415 section
// 21.4) is 0.5 and 0.8 of the preferred lifetime (the valid one when the
// preferred is 0, RFC 8415 section 18.2.4); a T2 not before the valid
// lifetime's end is 0.8 of it and a T1 after T2 is T2 (a renewal after the
// address is gone would be no renewal); under a second is a second.
func times(t1, t2, preferred, valid time.Duration) (time.Duration, time.Duration, []string) {
	var warn []string
	base := preferred
	if base == 0 {
		base = valid
	}
	frac := func(d time.Duration, num int64) time.Duration {
		if d == Infinite {
			return Infinite
		}
		return d / 10 * time.Duration(num)
	}
	if t1 == 0 {
		t1 = frac(base, 5)
	}
	if t2 == 0 {
		t2 = frac(base, 8)
	}
	if valid != Infinite && t2 >= valid {
		warn = append(warn, fmt.Sprintf("T2 %s is not before the end of the valid lifetime %s: rebinding at %s", t2, valid, frac(valid, 8)))
		t2 = frac(valid, 8)
	}
	if t1 > t2 {
		t1 = t2
	}
	return max(t1, time.Second), max(t2, time.Second), warn
}

// sameDUID says whether a DUID option holds the DUID want (wire bytes).
func sameDUID(d dhcpv6.DUID, want []byte) bool {
	return d != nil && bytes.Equal(d.ToBytes(), want)
}
