package leases

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/store"
)

// Request says for whom a lease is.
type Request struct {
	// Parent is the link the server is reached on.
	Parent string
	// MAC is the client hardware address: the endpoint's MAC (macvlan) or
	// the parent's (ipvlan).
	MAC net.HardwareAddr
	// ClientID is option 61, unique and stable per endpoint; set for
	// ipvlan endpoints, which share the parent's MAC.
	ClientID []byte
	// Address is the address to ask for again (after a NAK or a restart).
	Address netip.Addr
	// Only, when valid, is the one address Acquire may take: an offer of
	// another is not requested (winning a lost lease back: the container
	// cannot be given another address).
	Only netip.Addr
}

// Client talks DHCP for endpoints.
type Client interface {
	// Acquire runs DISCOVER/OFFER/REQUEST/ACK.
	Acquire(ctx context.Context, r Request) (store.Lease, error)
	// Renew extends a lease; an error wrapping ErrNAK means the server
	// refused it.
	Renew(ctx context.Context, r Request, l store.Lease) (store.Lease, error)
	// Release gives a lease back.
	Release(ctx context.Context, r Request, l store.Lease) error
	// Decline tells the server an offered address is in use (DHCPDECLINE).
	Decline(ctx context.Context, r Request, l store.Lease) error
}

// ErrNAK is wrapped by Client errors for a server's DHCPNAK.
var ErrNAK = errors.New("the DHCP server refused the lease (DHCPNAK)")
