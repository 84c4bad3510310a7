package leases

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/store/record"
)

// OverDHCP is the Client over the dhcp package's: it turns the package's
// leases (durations from the time they were acquired) into the durable
// record's (absolute times) and back, as Record and Lease do for DHCPv6.
type OverDHCP struct{ c *dhcp.Client }

// NewOverDHCP is the Client over c.
func NewOverDHCP(c *dhcp.Client) OverDHCP { return OverDHCP{c: c} }

func (a OverDHCP) Acquire(ctx context.Context, r Request) (record.Lease, error) {
	l, err := a.c.Acquire(ctx, request(r))
	if err != nil {
		return record.Lease{}, nakOr(err)
	}
	return toRecord(l, r), nil
}

func (a OverDHCP) Renew(ctx context.Context, r Request, s record.Lease) (record.Lease, error) {
	l, err := fromRecord(s)
	if err != nil {
		return record.Lease{}, err
	}
	n, err := a.c.Renew(ctx, l, request(r))
	if err != nil {
		return record.Lease{}, nakOr(err)
	}
	return toRecord(n, r), nil
}

func (a OverDHCP) Release(ctx context.Context, r Request, s record.Lease) error {
	l, err := fromRecord(s)
	if err != nil {
		return err
	}
	return a.c.Release(ctx, l, request(r))
}

func (a OverDHCP) Decline(ctx context.Context, r Request, s record.Lease) error {
	l, err := fromRecord(s)
	if err != nil {
		return err
	}
	return a.c.Decline(ctx, l, request(r))
}

func request(r Request) dhcp.Request {
	return dhcp.Request{Parent: r.Parent, MAC: r.MAC, ClientID: r.ClientID, Address: r.Address, Only: r.Only}
}

func nakOr(err error) error {
	if errors.Is(err, dhcp.ErrNAK) {
		return fmt.Errorf("%w: %w", ErrNAK, err)
	}
	return err
}

// forever stands for a lease granted forever in the record.
const forever = 100 * 365 * 24 * time.Hour

func toRecord(l dhcp.Lease, r Request) record.Lease {
	at := func(d time.Duration) time.Time {
		if d == dhcp.Infinite || d > forever {
			d = forever
		}
		return l.Acquired.Add(d)
	}
	s := record.Lease{Addr: l.Addr.String(), ServerID: addrString(l.ServerID), Router: addrString(l.Router),
		ClientID: hex.EncodeToString(r.ClientID), Acquired: l.Acquired, T1: at(l.T1), T2: at(l.T2), Expiry: at(l.LeaseTime)}
	for _, rt := range l.Routes {
		s.Routes = append(s.Routes, record.LeaseRoute{Dst: rt.Dst.String(), Gateway: addrString(rt.Gateway)})
	}
	return s
}

func fromRecord(s record.Lease) (dhcp.Lease, error) {
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
