package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/netaddr"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// RequestAddress hands out an address of a pool: the gateway (the first
// usable address, or a parent pool's LAN gateway), the address asked for if
// it is free, or one chosen by chooseAddress (the name's sticky address,
// else a never-used one, else the least recently used remembered one). On
// a LAN pool the chosen address is probed first (probeaddr.go). Picking
// and recording it is one transaction, and the first address confirms an
// auto pool's reservation. The host's own addresses are never handed out.
func (m *IPAM) RequestAddress(ctx context.Context, poolID, address string, opts map[string]string) (netip.Prefix, error) {
	if poolID == "" {
		return netip.Prefix{}, invalidf("RequestAddress without PoolID")
	}
	r := addrRequest{poolID: poolID, gateway: opts[keyRequestType] == typeGateway, name: opts[keyEndpointName]}
	if r.gateway {
		r.name = "" // a network's gateway is no endpoint's
	}
	if address != "" {
		a, err := netaddr.Parse(address)
		if err != nil {
			return netip.Prefix{}, invalidf("address %q of pool %s is not an IP address: %v", address, poolID, err)
		}
		r.want = a
	}
	rec, ok, err := m.readPool(poolID)
	if err != nil {
		return netip.Prefix{}, err
	}
	if ok && rec.DHCP && !r.gateway {
		used, err := m.dhcpPoolUsed(rec)
		switch {
		case err != nil:
			return netip.Prefix{}, err
		case used:
			return m.leaseAddress(ctx, rec, r)
		case r.name == "" && r.want.IsValid():
			// An --aux-address, asked for while the network is created
			// (before the driver's CreateNetwork): kept from the leases.
		default:
			return netip.Prefix{}, invalidf("pool %s leases its addresses from DHCP for underlay's network driver, and no underlay network uses it: create the network with -d underlay (the driver gives each container the MAC of its lease and renews it), or drop --ipam-opt dhcp=true (dhcpv6=true)", rec.ID)
		}
	}
	addrs, err := m.addrsNearPool(ctx, rec, ok)
	if err != nil {
		return netip.Prefix{}, err
	}
	r.own = make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		r.own[a.Prefix.Addr()] = true
	}
	switch {
	case r.gateway || m.prober == nil:
	case !r.want.IsValid():
		return m.requestProbed(ctx, r, addrs)
	default:
		if err := m.probeWanted(ctx, r, addrs); err != nil {
			return netip.Prefix{}, err
		}
	}
	return m.commitAddress(r)
}

// addrsNearPool returns the host's addresses whose subnet overlaps the
// pool's prefix (the host's own addresses in it among them); none for a
// pool that is unknown (allocate refuses it).
func (m *IPAM) addrsNearPool(ctx context.Context, rec store.IPAMPool, ok bool) ([]kernel.Addr, error) {
	if !ok {
		return nil, nil
	}
	pool, err := netip.ParsePrefix(rec.Prefix)
	if err != nil {
		return nil, nil // allocate refuses it
	}
	return m.host.AddrsNear(ctx, pool)
}

// readPool reads a pool's record.
func (m *IPAM) readPool(poolID string) (rec store.IPAMPool, ok bool, err error) {
	err = m.store.View(func(tx *store.Tx) (err error) {
		rec, ok, err = tx.IPAMPool(poolID)
		return err
	})
	return rec, ok, err
}

// addrRequest is a RequestAddress on its way.
type addrRequest struct {
	poolID  string
	want    netip.Addr // the address asked for (--ip, --gateway)
	gateway bool
	name    string              // the endpoint's name, "" when not sent
	own     map[netip.Addr]bool // the host's addresses (those in the pool at least)
	// probed is an address chosen and probed: it is handed out if it is
	// still free, else allocate fails with errRaced.
	probed netip.Addr
	// skip, when set, are more addresses not to choose.
	skip func(netip.Addr) bool
	// lease, on a DHCP pool, is the lease of want, recorded with it.
	lease *store.IPAMLease
}

// errRaced: the address chosen and probed was taken meanwhile.
var errRaced = errors.New("the address was taken while it was probed")

// commitAddress chooses and records an address in one transaction.
func (m *IPAM) commitAddress(r addrRequest) (netip.Prefix, error) {
	var got netip.Prefix
	var kind addrKind
	err := m.store.Batch(func(tx *store.Tx) (err error) {
		got, kind, err = m.allocate(tx, r, true)
		return err
	})
	if err != nil {
		return netip.Prefix{}, err
	}
	m.log.Debug("address handed out", "pool", r.poolID, "address", got, "gateway", r.gateway, "name", r.name, "kind", kind)
	return got, nil
}

// allocate chooses the request's address in tx, and, with commit,
// records it (and the name's sticky address).
func (m *IPAM) allocate(tx *store.Tx, r addrRequest, commit bool) (netip.Prefix, addrKind, error) {
	poolID, want, gateway := r.poolID, r.want, r.gateway
	rec, ok, err := tx.IPAMPool(poolID)
	if err != nil {
		return netip.Prefix{}, "", err
	}
	if !ok {
		return netip.Prefix{}, "", fmt.Errorf("%w: pool %s is unknown to underlay's IPAM (released, or its reservation expired before Docker used it): create the network again", pluginapi.ErrNotFound, poolID)
	}
	pool, err := netip.ParsePrefix(rec.Prefix)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("%w: pool %s has prefix %q", store.ErrCorrupt, poolID, rec.Prefix)
	}
	now := m.now()
	if rec.Expired(now) {
		held, err := tx.IPAMPools()
		if err != nil {
			return netip.Prefix{}, "", err
		}
		others := held[:0:0]
		for _, h := range held {
			if h.ID != rec.ID {
				others = append(others, h)
			}
		}
		if h, clash := overlapping(others, pool, rec.Space, func(p string) bool { return p == rec.Parent }, now); clash {
			return netip.Prefix{}, "", fmt.Errorf("%w: the reservation of pool %s (%s) expired and pool %s took its place: create the network again", pluginapi.ErrConflict, poolID, rec.Prefix, h.ID)
		}
	}
	held, err := holdersOn(tx, rec.Parent)
	if err != nil {
		return netip.Prefix{}, "", err
	}
	// why says why an address is not free ("" when it is).
	why := func(a netip.Addr) string {
		switch {
		case tx.IPAMAddressUsed(poolID, a.String()):
			return "handed out by this pool"
		case r.own[a]:
			return "the host's own address"
		case a.String() == rec.Gateway:
			return "the LAN's gateway"
		}
		return held.holder(a)
	}
	used := func(a netip.Addr) bool { return why(a) != "" }
	var a netip.Addr
	kind := addrKind("")
	switch {
	case want.IsValid():
		if !pool.Contains(want) {
			return netip.Prefix{}, "", invalidf("address %s is not in pool %s: pick an address inside the subnet", want, pool)
		}
		if !usable(pool, want) {
			return netip.Prefix{}, "", invalidf("address %s is reserved in pool %s (its network, broadcast or subnet-router anycast address): pick another address inside the subnet", want, pool)
		}
		if used(want) && !(gateway && want.String() == rec.Gateway && !tx.IPAMAddressUsed(poolID, want.String())) {
			return netip.Prefix{}, "", fmt.Errorf("%w: address %s of pool %s is already in use (%s): pick another or let underlay choose", pluginapi.ErrConflict, want, pool, why(want))
		}
		a = want
	case gateway && rec.Gateway != "":
		if a, err = netip.ParseAddr(rec.Gateway); err != nil {
			return netip.Prefix{}, "", fmt.Errorf("%w: pool %s has gateway %q", store.ErrCorrupt, poolID, rec.Gateway)
		}
	case gateway:
		a = firstUsable(pool)
		if used(a) {
			return netip.Prefix{}, "", fmt.Errorf("%w: the gateway address %s of pool %s is already in use (the host's own?): pass --gateway", pluginapi.ErrConflict, a, pool)
		}
	case r.probed.IsValid():
		if used(r.probed) {
			return netip.Prefix{}, "", errRaced
		}
		a = r.probed
	default:
		in, readErr, err := m.pickInput(tx, rec, pool, r, used, now)
		if err != nil {
			return netip.Prefix{}, "", err
		}
		a, kind, err = chooseAddress(in)
		if rerr := readErr(); rerr != nil {
			return netip.Prefix{}, "", rerr
		}
		if err != nil {
			return netip.Prefix{}, "", fmt.Errorf("%w: pool %s has no free address left: widen --ip-range or the subnet", pluginapi.ErrConflict, poolID)
		}
	}
	if held.err != nil {
		return netip.Prefix{}, "", held.err
	}
	if !commit {
		return netip.PrefixFrom(a, pool.Bits()), kind, nil
	}
	put := func() error { return tx.PutIPAMAddress(poolID, a.String()) }
	if r.lease != nil {
		put = func() error { return tx.PutIPAMLease(poolID, a.String(), *r.lease) }
	}
	if err := put(); err != nil {
		return netip.Prefix{}, "", err
	}
	if rec.Pending != nil {
		rec.Pending = nil // Docker uses it: confirmed
		if err := tx.PutIPAMPool(rec); err != nil {
			return netip.Prefix{}, "", err
		}
	}
	if !gateway {
		if err := m.recordName(tx, rec, a, r.name, now); err != nil {
			return netip.Prefix{}, "", err
		}
	}
	return netip.PrefixFrom(a, pool.Bits()), kind, nil
}

// ReleaseAddress frees an address; an unknown pool or address is fine.
func (m *IPAM) ReleaseAddress(ctx context.Context, poolID, address string) error {
	if poolID == "" || address == "" {
		return invalidf("ReleaseAddress without PoolID or Address")
	}
	a, err := netaddr.Parse(address)
	if err != nil {
		return invalidf("address %q of pool %s is not an IP address: %v", address, poolID, err)
	}
	var rec store.IPAMPool
	var lease store.IPAMLease
	var leased bool
	if err := m.store.Batch(func(tx *store.Tx) (err error) {
		if rec, leased, err = tx.IPAMPool(poolID); err != nil || !leased {
			return err
		}
		if lease, leased, err = tx.IPAMLease(poolID, a.String()); err != nil {
			// The address is freed all the same: it cannot be given back.
			m.log.Warn("unreadable IPAM lease record: the address is freed without a release", "pool", poolID, "address", a, "error", err)
			leased = false
		}
		if err := m.nameReleased(tx, poolID, a); err != nil {
			return err
		}
		return tx.DeleteIPAMAddress(poolID, a.String())
	}); err != nil {
		return fmt.Errorf("release address %s of pool %s: %w", a, poolID, err)
	}
	if leased {
		m.releaseLease(ctx, rec, lease)
	}
	m.log.Debug("address released", "pool", poolID, "address", a)
	return nil
}

// Events is told of what the IPAM driver does on a request's way, for
// counting (the metrics package implements it). Its methods must be safe
// for concurrent use and return at once.
type Events interface {
	// ReservationRolledBack: an automatic pool's reservation expired
	// unconfirmed and was deleted (kind "ipam"), one call per pool.
	ReservationRolledBack(kind string)
}

type noEvents struct{}

func (noEvents) ReservationRolledBack(string) {}
func (noEvents) AddressInUseOnLAN()           {}

// expired reports n reservations deleted by a committed purge.
func (m *IPAM) expired(n int) {
	for range n {
		m.events.ReservationRolledBack("ipam")
	}
}

// parentHolders are the daemon's networks on a pool's parent
// (--ipam-opt parent=), whose endpoints' addresses the pool does not hand
// out: a DHCP endpoint's lease as much as a static one's. The driver
// refuses such an address at CreateEndpoint anyway; the IPAM does not
// offer it. err keeps the first failed read (the address is then not
// offered, and the request fails with the error).
type parentHolders struct {
	tx     *store.Tx
	parent string
	nets   []record.Network
	err    error
}

// holdersOn reads the networks on parent ("" for a pool without one).
func holdersOn(tx *store.Tx, parent string) (*parentHolders, error) {
	p := &parentHolders{tx: tx, parent: parent}
	if parent == "" {
		return p, nil
	}
	nets, err := tx.NetworksOn(parent)
	p.nets = nets
	return p, err
}

// holder names the endpoint that holds a ("" when none): one read of the
// address index per network on the parent.
func (p *parentHolders) holder(a netip.Addr) string {
	for _, n := range p.nets {
		ids, err := p.tx.EndpointsWithAddr(n.ID, a)
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("read the endpoints holding %s on parent %s: %w", a, p.parent, err)
			}
			return "unreadable"
		}
		if len(ids) > 0 {
			return fmt.Sprintf("endpoint %s of network %s on parent %s holds it", dockerid.Short(ids[0]), dockerid.Short(n.ID), p.parent)
		}
	}
	return ""
}
