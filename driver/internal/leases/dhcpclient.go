package leases

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/internal/dhcprecord"
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
	return dhcprecord.ToRecord(l, request(r)), nil
}

func (a OverDHCP) Renew(ctx context.Context, r Request, s record.Lease) (record.Lease, error) {
	l, err := dhcprecord.FromRecord(s)
	if err != nil {
		return record.Lease{}, err
	}
	n, err := a.c.Renew(ctx, l, request(r))
	if err != nil {
		return record.Lease{}, nakOr(err)
	}
	return dhcprecord.ToRecord(n, request(r)), nil
}

func (a OverDHCP) Release(ctx context.Context, r Request, s record.Lease) error {
	l, err := dhcprecord.FromRecord(s)
	if err != nil {
		return err
	}
	return a.c.Release(ctx, l, request(r))
}

func (a OverDHCP) Decline(ctx context.Context, r Request, s record.Lease) error {
	l, err := dhcprecord.FromRecord(s)
	if err != nil {
		return err
	}
	return a.c.Decline(ctx, l, request(r))
}

func request(r Request) dhcp.Request {
	return dhcp.Request{Parent: r.Parent, MAC: r.MAC, ClientID: r.ClientID, Hostname: r.Hostname, FQDN: r.FQDN, Address: r.Address, Only: r.Only}
}

func nakOr(err error) error {
	if errors.Is(err, dhcp.ErrNAK) {
		return fmt.Errorf("%w: %w", ErrNAK, err)
	}
	return err
}
