package ipam

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/dhcprecord"
	"github.com/underlay-net/underlay/store"
)

// The two families of DHCP pools: what leaseAddress's one lifecycle asks
// of each (dhcp.go).

// leaseAsk is what an endpoint asks the LAN's server for.
type leaseAsk struct {
	parent, name string
	mac          net.HardwareAddr
	hostname     string     // "" for none
	fqdn         bool       // the host name in DHCP's option 81 too
	want         netip.Addr // --ip: the one address to take
	sticky       netip.Addr // the name's last address, asked for again
}

// leased is a lease a family took: its address, its record (the Lease or
// Lease6 part; leaseAddress fills the rest), and how to give it back.
type leased struct {
	addr netip.Addr
	rec  store.IPAMLease
	// back releases ("release") or declines it.
	back func(ctx context.Context, how string) error
}

// giveBackWait bounds one give-back: it must not hold a request that
// Docker waits for (DHCPv6 retransmits a Release for seconds).
const giveBackWait = 2 * time.Second

// giveBack releases or declines l (logged on failure), within
// giveBackWait.
func (l leased) giveBack(ctx context.Context, log *slog.Logger, how string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackWait)
	defer cancel()
	if err := l.back(ctx, how); err != nil {
		log.Warn("could not give a lease back", "how", how, "address", l.addr, "mac", l.rec.MAC, "error", err)
	}
}

// leaseFamily is one family's client as the lifecycle uses it.
type leaseFamily interface {
	name() string
	missing() bool
	// acquire leases an address for ask.
	acquire(ctx context.Context, ask leaseAsk) (leased, error)
	// held is a recorded lease, to give back.
	held(parent string, l store.IPAMLease) (leased, error)
}

// family is the family of an IPv6 (v6) or IPv4 pool.
func (m *IPAM) family(v6 bool) leaseFamily {
	if v6 {
		return dhcp6Family{m.dhcp6}
	}
	return dhcpFamily{m.dhcp}
}

// dhcpFamily: DHCP, with a client ID of the MAC (type 1), the host name
// as option 12, --ip as the only address to take (option 50), the name's
// last address asked for again.
type dhcpFamily struct{ c DHCPClient }

func (dhcpFamily) name() string            { return "DHCP" }
func (f dhcpFamily) missing() bool         { return f.c == nil }
func clientID(mac net.HardwareAddr) []byte { return append([]byte{1}, mac...) }

func (f dhcpFamily) acquire(ctx context.Context, ask leaseAsk) (leased, error) {
	req := dhcp.Request{Parent: ask.parent, MAC: ask.mac, ClientID: clientID(ask.mac), Hostname: ask.hostname, FQDN: ask.fqdn, Only: ask.want, Address: ask.sticky}
	l, err := f.c.Acquire(ctx, req)
	switch {
	case errors.Is(err, dhcp.ErrNotOffered):
		return leased{}, notGiven("DHCP", ask, err)
	case err != nil:
		return leased{}, fmt.Errorf("no DHCP lease for %s on %s within %s: %w: check that the LAN's DHCP server answers on %s", who(ask.name), ask.parent, dhcpTimeout, err, ask.parent)
	}
	rec := dhcprecord.ToRecord(l, req)
	return f.leased(l, req, store.IPAMLease{Lease: &rec}), nil
}

func (f dhcpFamily) held(parent string, l store.IPAMLease) (leased, error) {
	mac, err := net.ParseMAC(l.MAC)
	switch {
	case err != nil:
		return leased{}, fmt.Errorf("the recorded lease has no usable MAC %q: %w", l.MAC, err)
	case l.Lease == nil:
		return leased{}, fmt.Errorf("the record of MAC %s holds no DHCP lease", l.MAC)
	}
	dl, err := dhcprecord.FromRecord(*l.Lease)
	if err != nil {
		return leased{}, err
	}
	return f.leased(dl, dhcp.Request{Parent: parent, MAC: mac, ClientID: clientID(mac), Hostname: l.Hostname}, l), nil
}

func (f dhcpFamily) leased(l dhcp.Lease, req dhcp.Request, rec store.IPAMLease) leased {
	return leased{addr: l.Addr.Addr(), rec: rec, back: func(ctx context.Context, how string) error {
		if how == "decline" {
			return f.c.Decline(ctx, l, req)
		}
		return f.c.Release(ctx, l, req)
	}}
}

// dhcp6Family: DHCPv6, with the DUID-LL of the MAC, an IAID of its last
// four bytes, the host name as option 39, and --ip (or the name's last
// address) as the Solicit's hint: another address given is refused for
// --ip.
type dhcp6Family struct{ c DHCP6Client }

func (dhcp6Family) name() string    { return "DHCPv6" }
func (f dhcp6Family) missing() bool { return f.c == nil }

// iaid is the IAID of an endpoint of mac: its last four bytes.
func iaid(mac net.HardwareAddr) [4]byte { return [4]byte(mac[len(mac)-4:]) }

func (f dhcp6Family) acquire(ctx context.Context, ask leaseAsk) (leased, error) {
	req := dhcp6.Request{Parent: ask.parent, MAC: ask.mac, DUID: dhcp6.DUIDFromMAC(ask.mac), IAID: iaid(ask.mac), Hostname: ask.hostname, Hint: ask.sticky}
	if ask.want.IsValid() {
		req.Hint = ask.want
	}
	l, err := f.c.Acquire(ctx, req)
	if err != nil {
		return leased{}, fmt.Errorf("no DHCPv6 lease for %s on %s within %s: %w: check that the LAN's DHCPv6 server answers on %s", who(ask.name), ask.parent, dhcpTimeout, err, ask.parent)
	}
	rec := dhcprecord.ToRecord6(l, req)
	return f.leased(l, req, store.IPAMLease{Lease6: &rec}), nil
}

func (f dhcp6Family) held(parent string, l store.IPAMLease) (leased, error) {
	mac, err := net.ParseMAC(l.MAC)
	switch {
	case err != nil:
		return leased{}, fmt.Errorf("the recorded lease has no usable MAC %q: %w", l.MAC, err)
	case l.Lease6 == nil:
		return leased{}, fmt.Errorf("the record of MAC %s holds no DHCPv6 lease", l.MAC)
	}
	duid, err := hex.DecodeString(l.Lease6.DUID)
	if err != nil {
		return leased{}, fmt.Errorf("the recorded DHCPv6 lease's DUID %q: %w", l.Lease6.DUID, err)
	}
	dl := dhcprecord.FromRecord6(*l.Lease6)
	return f.leased(dl, dhcp6.Request{Parent: parent, MAC: mac, DUID: duid, IAID: dl.IAID}, l), nil
}

func (f dhcp6Family) leased(l dhcp6.Lease, req dhcp6.Request, rec store.IPAMLease) leased {
	return leased{addr: l.Addr, rec: rec, back: func(ctx context.Context, how string) error {
		if how == "decline" {
			return f.c.Decline(ctx, l, req)
		}
		return f.c.Release(ctx, l, req)
	}}
}
