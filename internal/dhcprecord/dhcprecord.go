// Package dhcprecord converts the dhcp package's leases (durations from
// when they were acquired) to the state file's record.Lease (absolute
// times) and back, and the dhcp6 package's to record.Lease6 (hex
// identities): for the driver's leases and the IPAM's alike.
package dhcprecord

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/store/record"
)

// forever stands for a lease granted forever in the record.
const forever = 100 * 365 * 24 * time.Hour

// ToRecord is the durable record of lease l, acquired (or renewed) with
// request r, whose client ID (option 61) and host name (option 12) it
// keeps: absolute times in place of durations from when it was acquired.
func ToRecord(l dhcp.Lease, r dhcp.Request) record.Lease {
	at := func(d time.Duration) time.Time {
		if d == dhcp.Infinite || d > forever {
			d = forever
		}
		return l.Acquired.Add(d)
	}
	s := record.Lease{Addr: l.Addr.String(), ServerID: addrString(l.ServerID), Router: addrString(l.Router),
		ClientID: hex.EncodeToString(r.ClientID), Hostname: r.Hostname, FQDN: r.FQDN, Acquired: l.Acquired, T1: at(l.T1), T2: at(l.T2), Expiry: at(l.LeaseTime)}
	for _, rt := range l.Routes {
		s.Routes = append(s.Routes, record.LeaseRoute{Dst: rt.Dst.String(), Gateway: addrString(rt.Gateway)})
	}
	return s
}

// FromRecord is the dhcp package's lease of record s.
func FromRecord(s record.Lease) (dhcp.Lease, error) {
	addr, err := netip.ParsePrefix(s.Addr)
	if err != nil {
		return dhcp.Lease{}, fmt.Errorf("the recorded lease's address %q does not parse: %w", s.Addr, err)
	}
	t1, t2, lt := s.Durations()
	l := dhcp.Lease{Addr: addr, Acquired: s.Acquired, T1: t1, T2: t2, LeaseTime: lt}
	l.ServerID, _ = netip.ParseAddr(s.ServerID)
	l.Router, _ = netip.ParseAddr(s.Router)
	for _, rt := range s.Routes {
		dst, derr := netip.ParsePrefix(rt.Dst)
		gw, _ := netip.ParseAddr(rt.Gateway)
		if derr == nil {
			l.Routes = append(l.Routes, dhcp.Route{Dst: dst, Gateway: gw})
		}
	}
	return l, nil
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// ToRecord6 is the durable record of DHCPv6 lease l, acquired (or
// renewed) with request r, whose DUID and host name (option 39) it keeps.
func ToRecord6(l dhcp6.Lease, r dhcp6.Request) record.Lease6 {
	return record.Lease6{Addr: l.Addr.String(), DUID: hex.EncodeToString(r.DUID), Hostname: r.Hostname, IAID: hex.EncodeToString(l.IAID[:]),
		ServerID: hex.EncodeToString(l.ServerID), Acquired: l.Acquired, T1: l.T1, T2: l.T2, Preferred: l.Preferred, Valid: l.Valid}
}

// FromRecord6 is the dhcp6 package's lease of record rec.
func FromRecord6(rec record.Lease6) dhcp6.Lease {
	addr, _ := netip.ParseAddr(rec.Addr)
	sid, _ := hex.DecodeString(rec.ServerID)
	var iaid [4]byte
	if b, err := hex.DecodeString(rec.IAID); err == nil && len(b) == 4 {
		iaid = [4]byte(b)
	}
	return dhcp6.Lease{Addr: addr, ServerID: sid, IAID: iaid, Acquired: rec.Acquired, T1: rec.T1, T2: rec.T2, Preferred: rec.Preferred, Valid: rec.Valid}
}
