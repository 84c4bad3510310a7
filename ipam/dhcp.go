package ipam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/internal/dhcprecord"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
)

// DHCP pools (--ipam-opt dhcp=true, issue 36): a LAN pool whose addresses
// the LAN's DHCP server gives. RequestAddress leases one for the endpoint
// with the MAC of its name (lanmac.NameMAC over the parent's base address
// and VLAN: the same name gets the same MAC, so the same lease, after any
// re-creation), a client ID of that MAC and the name as its host name, and
// records the lease as the address's value. The driver's CreateEndpoint
// gives the endpoint that MAC and takes the lease over (renewals, release
// at DeleteEndpoint); ReleaseAddress gives back a lease no endpoint took.

// Option keys of DHCP pools.
const (
	OptDHCP         = "dhcp"
	OptDHCPHostname = "dhcp_hostname"
)

const (
	// dhcpTimeout bounds one RequestAddress's DHCP exchanges (dockerd
	// waits 30 s for a plugin's answer).
	dhcpTimeout = 10 * time.Second
	// maxDHCPDeclines is how many offered addresses one RequestAddress
	// declines (held on the host or by another endpoint) before it
	// refuses.
	maxDHCPDeclines = 3
)

// DHCPClient is the DHCP client of DHCP pools; *dhcp.Client implements it.
type DHCPClient interface {
	Acquire(ctx context.Context, r dhcp.Request) (dhcp.Lease, error)
	Release(ctx context.Context, l dhcp.Lease, r dhcp.Request) error
	Decline(ctx context.Context, l dhcp.Lease, r dhcp.Request) error
}

// dhcpOptions are the option table's rows of DHCP pools.
func dhcpOptions() []PoolOption {
	return []PoolOption{
		{
			Name: OptDHCP, Values: "`true` or `false`", Default: "`false`",
			Doc: "The pool's IPv4 addresses come from the LAN's DHCP server on `parent`, each leased with the MAC of the container's name: see [Identity by name](#identity-by-name).",
			parse: func(p *poolParsing, v string, given bool) error {
				if !given || p.r.V6 {
					return nil
				}
				on, err := strconv.ParseBool(v)
				if err != nil {
					return invalidf("--ipam-opt dhcp=%s is not true or false", v)
				}
				if on && p.r.Parent == "" {
					return invalidf("--ipam-opt dhcp=true needs --ipam-opt parent=IFACE: the interface on the LAN whose DHCP server gives the addresses (the network's -o parent)")
				}
				p.r.DHCP = on
				return nil
			},
		},
		{
			Name: OptDHCPHostname, Values: "`true` or `false`", Default: "`true`",
			Doc: "With `dhcp`: tell the LAN's DHCP server the container's name as its host name (option 12), so the LAN's DNS resolves it.",
			parse: func(p *poolParsing, v string, given bool) error {
				if !given {
					return nil
				}
				on, err := strconv.ParseBool(v)
				if err != nil {
					return invalidf("--ipam-opt dhcp_hostname=%s is not true or false", v)
				}
				if !p.r.DHCP && !p.r.V6 {
					return invalidf("--ipam-opt dhcp_hostname=%s applies to --ipam-opt dhcp=true pools: add dhcp=true, or drop it", v)
				}
				p.r.NoHostname = !on
				return nil
			},
		},
	}
}

// checkDHCPPool refuses a DHCP pool this daemon cannot lease for.
func (m *IPAM) checkDHCPPool(req poolRequest, parent parentRef) error {
	switch {
	case !req.DHCP:
		return nil
	case m.dhcp == nil:
		return invalidf("--ipam-opt dhcp=true: this underlay runs without a DHCP client: drop dhcp=true")
	case !parent.Found:
		return invalidf("--ipam-opt dhcp=true: parent %s is not an interface of this host: the IPAM leases from the host's own link, name one that exists here", req.Parent)
	}
	return nil
}

// leaseAddress is RequestAddress on a DHCP pool: the lease of the name's
// MAC (a random one without a name), checked free and recorded with the
// address, declining offers the host or another endpoint holds.
func (m *IPAM) leaseAddress(ctx context.Context, rec store.IPAMPool, r addrRequest) (netip.Prefix, error) {
	if m.dhcp == nil {
		return netip.Prefix{}, invalidf("pool %s takes its addresses from DHCP, and this underlay runs without a DHCP client: create the network without --ipam-opt dhcp=true", rec.ID)
	}
	pool, err := netip.ParsePrefix(rec.Prefix)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: pool %s has prefix %q", store.ErrCorrupt, rec.ID, rec.Prefix)
	}
	name := strings.TrimPrefix(r.name, "/")
	if err := m.nameFree(rec, name); err != nil {
		return netip.Prefix{}, err
	}
	req, err := m.dhcpRequest(ctx, rec, name)
	if err != nil {
		return netip.Prefix{}, err
	}
	if r.want.IsValid() {
		req.Only = r.want
	} else if sticky, err := m.stickyAddr(rec, name); err != nil {
		return netip.Prefix{}, err
	} else {
		req.Address = sticky
	}
	ctx, cancel := context.WithTimeout(ctx, dhcpTimeout)
	defer cancel()
	own, err := m.host.AddrsNear(ctx, pool)
	if err != nil {
		return netip.Prefix{}, err
	}
	r.own = make(map[netip.Addr]bool, len(own))
	for _, a := range own {
		r.own[a.Prefix.Addr()] = true
	}
	for declined := 0; ; declined++ {
		l, err := m.dhcp.Acquire(ctx, req)
		switch {
		case errors.Is(err, dhcp.ErrNotOffered):
			return netip.Prefix{}, fmt.Errorf("%w: the address %s asked for (--ip) was not given by the LAN's DHCP server on %s: %w. Drop --ip to take the server's address, or reserve %s for MAC %s on the server", pluginapi.ErrConflict, r.want, rec.Parent, err, r.want, req.MAC)
		case err != nil:
			return netip.Prefix{}, fmt.Errorf("no DHCP lease for %s on %s within %s: %w: check that the LAN's DHCP server answers on %s", who(name), rec.Parent, dhcpTimeout, err, rec.Parent)
		}
		a := l.Addr.Addr()
		if !pool.Contains(a) {
			m.giveBack(ctx, l, req, "release")
			return netip.Prefix{}, invalidf("the LAN's DHCP server on %s leased %s, outside the pool %s: give the network the LAN's subnet (--subnet %s)", rec.Parent, l.Addr, pool, l.Addr.Masked())
		}
		got, err := m.commitLease(rec, r, name, req, l)
		if err == nil {
			m.log.Info("address leased from the LAN's DHCP server", "pool", rec.ID, "name", name, "address", l.Addr, "mac", req.MAC.String(), "server", l.ServerID, "hostname", req.Hostname)
			return got, nil
		}
		if !errors.Is(err, pluginapi.ErrConflict) || declined+1 >= maxDHCPDeclines || r.want.IsValid() {
			m.giveBack(ctx, l, req, "decline")
			return netip.Prefix{}, err
		}
		m.log.Warn("DHCP offer declined: the address is held", "pool", rec.ID, "name", name, "address", a, "error", err)
		m.giveBack(ctx, l, req, "decline")
	}
}

// who names the requester in errors.
func who(name string) string {
	if name == "" {
		return "an endpoint without a name"
	}
	return fmt.Sprintf("container %q", name)
}

// giveBack releases or declines a lease not kept (logged on failure).
func (m *IPAM) giveBack(ctx context.Context, l dhcp.Lease, req dhcp.Request, how string) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if how == "decline" {
		err = m.dhcp.Decline(ctx, l, req)
	} else {
		err = m.dhcp.Release(ctx, l, req)
	}
	if err != nil {
		m.log.Warn("could not give a DHCP lease back", "how", how, "address", l.Addr, "mac", req.MAC.String(), "error", err)
	}
}

// dhcpRequest is the DHCP request of name on rec's parent: the name's MAC
// (a random one without a name, said once per pool), a client ID of that
// MAC (type 1), the name as host name unless the pool says not.
func (m *IPAM) dhcpRequest(ctx context.Context, rec store.IPAMPool, name string) (dhcp.Request, error) {
	req := dhcp.Request{Parent: rec.Parent}
	if name == "" {
		req.MAC = lanmac.Random()
		m.noName.once(rec.ID, func() {
			m.log.Info("the engine sent no endpoint name: DHCP leases of this pool use random MACs, and a re-created container gets a new lease (engine 28.5 and older send none)", "pool", rec.ID, "parent", rec.Parent)
		})
	} else {
		mac, err := m.NameMAC(ctx, rec.Parent, 0, name)
		if err != nil {
			return req, err
		}
		req.MAC = mac
		if !rec.NoHostname {
			if h, ok := lanmac.HostLabel(name); ok {
				req.Hostname = h
			} else {
				m.log.Warn("container name is no DNS label: not told to the LAN as a host name", "pool", rec.ID, "name", name)
			}
		}
	}
	req.ClientID = append([]byte{1}, req.MAC...)
	return req, nil
}

// NameMAC is the MAC of name on parent (a link of the host, by name or
// altname): lanmac.NameMAC over the parent's base address, and its VLAN
// ID, or vlan when the parent is the base of a VLAN not made yet.
func (m *IPAM) NameMAC(ctx context.Context, parent string, vlan int, name string) (net.HardwareAddr, error) {
	return NameMAC(ctx, m.host, parent, vlan, name)
}

// LinkReader reads links by name and index; *netlinkutil.Kernel
// implements it.
type LinkReader interface {
	Get(ctx context.Context, name string) (kernel.Link, error)
	LinkByIndex(ctx context.Context, index int) (kernel.Link, error)
}

// NameMAC is the MAC an endpoint of name gets on parent (underlay mac
// prints it): lanmac.NameMAC over the parent's base address (its
// permanent one; a VLAN's base link's) and VLAN ID (the parent's own, or
// vlan for a VLAN to be made on parent).
func NameMAC(ctx context.Context, links LinkReader, parent string, vlan int, name string) (net.HardwareAddr, error) {
	p, err := links.Get(ctx, parent)
	if err != nil {
		return nil, fmt.Errorf("read parent %s for the MAC of name %q: %w", parent, name, err)
	}
	var lower []kernel.Link
	if p.Kind == kernel.KindVLAN && p.ParentIndex != 0 {
		if vlan != 0 {
			return nil, fmt.Errorf("parent %s is itself VLAN %d: give its base link with --vlan, or drop --vlan", parent, p.VLAN)
		}
		if l, err := links.LinkByIndex(ctx, p.ParentIndex); err == nil {
			lower = append(lower, l)
		}
		vlan = p.VLAN
	}
	base := lanmac.MACBase(p, lower)
	if base == nil {
		return nil, fmt.Errorf("parent %s has no MAC address to derive the MAC of name %q from: name an Ethernet link", parent, name)
	}
	return lanmac.NameMAC(base, vlan, name), nil
}

// nameFree refuses a name that holds a lease of another DHCP pool on the
// same parent: its MAC would be there twice (one container on two DHCP
// networks of one parent).
func (m *IPAM) nameFree(rec store.IPAMPool, name string) error {
	if name == "" {
		return nil
	}
	return m.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		if err != nil {
			return err
		}
		for _, p := range pools {
			if p.ID == rec.ID || !p.DHCP || p.Parent != rec.Parent {
				continue
			}
			for _, a := range tx.IPAMAddresses(p.ID) {
				l, ok, err := tx.IPAMLease(p.ID, a)
				if err != nil {
					return err
				}
				if ok && l.Name == name {
					where := fmt.Sprintf("the DHCP pool %s (%s)", p.ID, p.Prefix)
					if l.NetworkID != "" {
						where = fmt.Sprintf("network %s (pool %s)", dockerid.Short(l.NetworkID), p.Prefix)
					}
					return fmt.Errorf("%w: container %q already has its name's MAC %s on parent %s, with address %s on %s: a name has one MAC per parent, so one container can be on one DHCP network of a parent: disconnect it from that network first, or use one network",
						pluginapi.ErrConflict, name, l.MAC, rec.Parent, a, where)
				}
			}
		}
		return nil
	})
}

// stickyAddr is the address name was last given in rec's subnet (asked
// for again, option 50); zero for none.
func (m *IPAM) stickyAddr(rec store.IPAMPool, name string) (netip.Addr, error) {
	var a netip.Addr
	if name == "" {
		return a, nil
	}
	err := m.store.View(func(tx *store.Tx) error {
		n, ok, err := tx.IPAMName(nameScope(rec), rec.Prefix, name)
		if ok {
			a, _ = netip.ParseAddr(n.Address)
		}
		return err
	})
	return a, err
}

// commitLease records the leased address in one transaction with the
// checks of any address (allocate: the host's, this pool's, the parent's
// other holders'); an address of the same name in the pool is a stale one
// (Docker's names are unique): it goes.
func (m *IPAM) commitLease(rec store.IPAMPool, r addrRequest, name string, req dhcp.Request, l dhcp.Lease) (netip.Prefix, error) {
	r.want = l.Addr.Addr()
	r.lease = &store.IPAMLease{Name: name, MAC: req.MAC.String(), Hostname: req.Hostname, Lease: dhcprecord.ToRecord(l, req.ClientID)}
	var got netip.Prefix
	err := m.store.Batch(func(tx *store.Tx) error {
		if name != "" {
			for _, a := range tx.IPAMAddresses(rec.ID) {
				old, ok, err := tx.IPAMLease(rec.ID, a)
				if err != nil {
					return err
				}
				if ok && old.Name == name {
					if err := tx.DeleteIPAMAddress(rec.ID, a); err != nil {
						return err
					}
				}
			}
		}
		var err error
		got, _, err = m.allocate(tx, r, true)
		return err
	})
	return got, err
}

// releaseLease gives back the lease of an address no endpoint took over
// (ReleaseAddress after a CreateEndpoint that failed or never came).
func (m *IPAM) releaseLease(ctx context.Context, rec store.IPAMPool, l store.IPAMLease) {
	if m.dhcp == nil || l.EndpointID != "" {
		return
	}
	mac, err := net.ParseMAC(l.MAC)
	if err != nil {
		return
	}
	dl, err := dhcprecord.FromRecord(l.Lease)
	if err != nil {
		return
	}
	req := dhcp.Request{Parent: rec.Parent, MAC: mac, Hostname: l.Hostname}
	req.ClientID = append([]byte{1}, mac...)
	m.giveBack(ctx, dl, req, "release")
}

// onceSet runs a function once per key (the log line once per pool).
type onceSet struct {
	mu   sync.Mutex
	done map[string]bool
}

func (o *onceSet) once(key string, f func()) {
	o.mu.Lock()
	first := !o.done[key]
	if first {
		if o.done == nil {
			o.done = map[string]bool{}
		}
		o.done[key] = true
	}
	o.mu.Unlock()
	if first {
		f()
	}
}
