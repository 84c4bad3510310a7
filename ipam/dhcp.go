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
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/internal/netaddr"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store"
)

// DHCP pools (--ipam-opt dhcp=true for IPv4, dhcpv6=true for IPv6; issue
// 36): a LAN pool whose addresses the LAN's DHCP (DHCPv6) server gives.
// RequestAddress leases one for the endpoint with the MAC of its name
// (lanmac.NameMAC over the parent's base address and VLAN: the same name
// gets the same MAC, so the same lease, after any re-creation), a client
// identity of that MAC (DHCP's client ID, DHCPv6's DUID-LL) and the name
// as its host name, and records the lease as the address's value. The
// driver's CreateEndpoint gives the endpoint that MAC and takes the lease
// over (renewals, release at DeleteEndpoint); ReleaseAddress gives back a
// lease no endpoint took. The two families differ only in their client
// (leaseFamily: dhcpFamily, dhcp6Family); the lifecycle is one.

// Option keys of DHCP pools.
const (
	OptDHCP         = "dhcp"
	OptDHCPv6       = "dhcpv6"
	OptDHCPHostname = "dhcp_hostname"
	OptDHCPFQDN     = "dhcp_fqdn"
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

// DHCP6Client is the DHCPv6 client of DHCPv6 pools; *dhcp6.Client
// implements it.
type DHCP6Client interface {
	Acquire(ctx context.Context, r dhcp6.Request) (dhcp6.Lease, error)
	Release(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
	Decline(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) error
}

// dhcpOptions are the option table's rows of DHCP pools.
func dhcpOptions() []PoolOption {
	return []PoolOption{
		{
			Name: OptDHCP, Values: "`true` or `false`", Default: "`false`",
			Doc:   "The pool's IPv4 addresses come from the LAN's DHCP server on `parent`, each leased with the MAC of the container's name: see [Identity by name](lan.md#identity-by-name).",
			parse: func(p *poolParsing, v string, given bool) error { return parseDHCPOption(p, OptDHCP, false, v, given) },
		},
		{
			Name: OptDHCPv6, Values: "`true` or `false`", Default: "`false`",
			Doc:   "The pool's IPv6 addresses come from the LAN's DHCPv6 server on `parent`, each leased with the MAC of the container's name: see [Identity by name](lan.md#identity-by-name).",
			parse: func(p *poolParsing, v string, given bool) error { return parseDHCPOption(p, OptDHCPv6, true, v, given) },
		},
		{
			Name: OptDHCPHostname, Values: "`true` or `false`", Default: "`true`",
			Doc: "With `dhcp` or `dhcpv6`: tell the LAN's server the container's name as its host name (DHCP option 12, DHCPv6 option 39), so the LAN's DNS resolves it.",
			parse: func(p *poolParsing, v string, given bool) error {
				if !given {
					return nil
				}
				on, err := strconv.ParseBool(v)
				if err != nil {
					return invalidf("--ipam-opt dhcp_hostname=%s is not true or false", v)
				}
				if !p.dhcpAsked {
					return invalidf("--ipam-opt dhcp_hostname=%s applies to --ipam-opt dhcp=true and dhcpv6=true pools: add one, or drop it", v)
				}
				p.r.NoHostname = !on
				return nil
			},
		},
		{
			Name: OptDHCPFQDN, Values: "`true` or `false`", Default: "`false`",
			Doc: "With `dhcp`: send the host name in the Client FQDN option (81) too, for DHCP servers that register only names sent that way.",
			parse: func(p *poolParsing, v string, given bool) error {
				if !given {
					return nil
				}
				on, err := strconv.ParseBool(v)
				if err != nil {
					return invalidf("--ipam-opt dhcp_fqdn=%s is not true or false", v)
				}
				if on && !p.dhcp4Asked {
					return invalidf("--ipam-opt dhcp_fqdn=true applies to --ipam-opt dhcp=true pools (DHCPv6 sends the name in option 39 anyway): add dhcp=true, or drop it")
				}
				p.r.FQDN = on && !p.r.V6
				return nil
			},
		},
	}
}

// parseDHCPOption takes dhcp (v6 false) or dhcpv6: the pool of its family
// is a DHCP pool; both need the parent.
func parseDHCPOption(p *poolParsing, key string, v6 bool, v string, given bool) error {
	if !given {
		return nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return invalidf("--ipam-opt %s=%s is not true or false", key, v)
	}
	if on && p.r.Parent == "" {
		return invalidf("--ipam-opt %s=true needs --ipam-opt parent=IFACE: the interface on the LAN whose server gives the addresses (the network's -o parent)", key)
	}
	p.dhcpAsked = p.dhcpAsked || on
	p.dhcp4Asked = p.dhcp4Asked || on && !v6
	if p.r.V6 == v6 {
		p.r.DHCP = on
	}
	return nil
}

// checkDHCPPool refuses a DHCP pool this daemon cannot lease for.
func (m *IPAM) checkDHCPPool(req poolRequest, parent parentRef) error {
	switch {
	case !req.DHCP:
		return nil
	case m.family(req.V6).missing():
		key := map[bool]string{false: OptDHCP, true: OptDHCPv6}[req.V6]
		return invalidf("--ipam-opt %s=true: this underlay runs without a %s client: drop %s=true", key, m.family(req.V6).name(), key)
	case !parent.Found:
		return invalidf("--ipam-opt %s=true: parent %s is not an interface of this host: the IPAM leases from the host's own link, name one that exists here", map[bool]string{false: OptDHCP, true: OptDHCPv6}[req.V6], req.Parent)
	case req.Range.IsValid():
		return invalidf("--ip-range %s on a DHCP pool: the LAN's server picks the addresses, not underlay: set the range on the server, or drop --ip-range", req.Range)
	}
	return nil
}

// dhcpPoolUsed says whether an underlay network uses the DHCP pool rec
// (its parent and prefix; the driver records it with CreateNetwork, after
// the pool's gateway and aux addresses were asked for).
func (m *IPAM) dhcpPoolUsed(rec store.IPAMPool) (bool, error) {
	var used bool
	err := m.store.View(func(tx *store.Tx) error {
		nets, err := tx.NetworksOn(rec.Parent)
		for _, n := range nets {
			pools, from := n.IPv4, n.Config.DHCP.FromIPAM
			if v6(rec) {
				pools, from = n.IPv6, n.Config.DHCP.FromIPAM6
			}
			for _, p := range pools {
				if pfx, perr := netip.ParsePrefix(p.Subnet); from && perr == nil && pfx.Masked().String() == rec.Prefix {
					used = true
				}
			}
		}
		return err
	})
	return used, err
}

// leaseAddress is RequestAddress on a DHCP pool: the lease of the name's
// MAC (a random one without a name), checked free and recorded with the
// address, declining offers the host or another endpoint holds.
func (m *IPAM) leaseAddress(ctx context.Context, rec store.IPAMPool, r addrRequest) (netip.Prefix, error) {
	pool, err := netip.ParsePrefix(rec.Prefix)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: pool %s has prefix %q", store.ErrCorrupt, rec.ID, rec.Prefix)
	}
	fam := m.family(pool.Addr().Is6())
	if fam.missing() {
		return netip.Prefix{}, invalidf("pool %s takes its addresses from %s, and this underlay runs without a %s client: create the network without --ipam-opt dhcp=true (dhcpv6=true)", rec.ID, fam.name(), fam.name())
	}
	name := strings.TrimPrefix(r.name, "/")
	if err := m.nameFree(rec, name); err != nil {
		return netip.Prefix{}, err
	}
	ask, err := m.leaseAsk(ctx, rec, name)
	if err != nil {
		return netip.Prefix{}, err
	}
	ask.want = r.want
	if !r.want.IsValid() {
		if ask.sticky, err = m.stickyAddr(rec, name); err != nil {
			return netip.Prefix{}, err
		}
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
		l, err := fam.acquire(ctx, ask)
		if err != nil {
			return netip.Prefix{}, err
		}
		if !pool.Contains(l.addr) {
			l.giveBack(ctx, m.log, "release")
			return netip.Prefix{}, invalidf("the LAN's %s server on %s leased %s, outside the pool %s: give the network the LAN's subnet (--subnet), the one the server's address is in", fam.name(), rec.Parent, l.addr, pool)
		}
		if r.want.IsValid() && l.addr != r.want {
			l.giveBack(ctx, m.log, "release")
			return netip.Prefix{}, notGiven(fam.name(), ask, fmt.Errorf("it gave %s", l.addr))
		}
		if held, err := m.probeLeased(ctx, rec, ask, l); err != nil {
			l.giveBack(ctx, m.log, "release") // not known to be held
			return netip.Prefix{}, err
		} else if held != "" {
			l.giveBack(ctx, m.log, "decline")
			if r.want.IsValid() || declined+1 >= maxDHCPDeclines {
				return netip.Prefix{}, fmt.Errorf("%w: the LAN's %s server on %s leased %s, which %s answers for on the LAN (declined): free it on the LAN, or check the server's range", pluginapi.ErrConflict, fam.name(), rec.Parent, l.addr, held)
			}
			continue
		}
		l.rec.Name, l.rec.MAC, l.rec.Hostname = name, ask.mac.String(), ask.hostname
		got, err := m.commitLease(rec, r, name, l)
		if err == nil {
			m.log.Info("address leased from the LAN's "+fam.name()+" server", "pool", rec.ID, "name", name, "address", l.addr, "mac", ask.mac.String(), "hostname", ask.hostname)
			return got, nil
		}
		if !errors.Is(err, pluginapi.ErrConflict) {
			l.giveBack(ctx, m.log, "release")
			return netip.Prefix{}, err
		}
		l.giveBack(ctx, m.log, "decline")
		if r.want.IsValid() {
			return netip.Prefix{}, err
		}
		if declined+1 >= maxDHCPDeclines {
			return netip.Prefix{}, fmt.Errorf("the LAN's %s server on %s offered %d addresses that are held here (declined each): %w: check the server's range against the addresses of the host and of its containers", fam.name(), rec.Parent, maxDHCPDeclines, err)
		}
		m.log.Warn("offered address declined: it is held", "pool", rec.ID, "name", name, "address", l.addr, "error", err)
	}
}

// probeLeased probes a leased address on the LAN with the pool's budget
// (address_probe; the default when not given) from the name's MAC, as a
// well-behaved DHCP client checks its lease (RFC 2131 section 2.2): held
// names the MAC that answered ("" for none). A probe that could not run
// keeps the lease, with a WARN; one probed clean is told to the probe memo,
// so the driver's CreateEndpoint does not probe it again.
func (m *IPAM) probeLeased(ctx context.Context, rec store.IPAMPool, ask leaseAsk, l leased) (held string, err error) {
	budget := probeBudget(rec)
	if dl, ok := ctx.Deadline(); ok {
		// What is left of the request's time, less a margin for the commit.
		budget = min(budget, time.Until(dl)-500*time.Millisecond)
	}
	if m.prober == nil || budget <= 0 {
		return "", nil
	}
	perr := m.probeOne(ctx, rec.Parent, ask.mac, l.addr, budget)
	var ce *probe.ConflictError
	switch {
	case errors.As(perr, &ce):
		m.probeEvents.AddressInUseOnLAN()
		m.log.Warn("leased address is in use on the LAN: declined", "pool", rec.ID, "address", l.addr, "held_by", ce.MAC.String(), "name", ask.name)
		return "MAC " + ce.MAC.String(), nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("probe leased address %s on %s: %w", l.addr, rec.Parent, ctx.Err())
	case perr != nil:
		m.log.Warn("could not probe a leased address on the LAN; keeping it unprobed", "pool", rec.ID, "address", l.addr, "error", perr)
		return "", nil
	}
	m.memo.Probed(rec.Parent, l.addr, budget)
	return "", nil
}

// notGiven is the refusal of an address asked for (--ip, --ip6) that the
// LAN's server (of family fam) did not give; why says what it did.
func notGiven(fam string, ask leaseAsk, why error) error {
	flag := map[bool]string{false: "--ip", true: "--ip6"}[ask.want.Is6()]
	return fmt.Errorf("%w: the address %s asked for (%s) was not given by the LAN's %s server on %s: %w: drop %s to take the server's address, or reserve %s for MAC %s on the server",
		pluginapi.ErrConflict, ask.want, flag, fam, ask.parent, why, flag, ask.want, ask.mac)
}

// who names the requester in errors.
func who(name string) string {
	if name == "" {
		return "an endpoint without a name"
	}
	return fmt.Sprintf("container %q", name)
}

// leaseAsk is what name asks the LAN for on rec's parent: the name's MAC
// (a random one without a name, said once per pool) and the name as its
// host name unless the pool says not.
func (m *IPAM) leaseAsk(ctx context.Context, rec store.IPAMPool, name string) (leaseAsk, error) {
	ask := leaseAsk{parent: rec.Parent, name: name, fqdn: rec.FQDN}
	if name == "" {
		ask.mac = lanmac.Random()
		m.noName.once(rec.ID, func() {
			m.log.Info("the engine sent no endpoint name: DHCP leases of this pool use random MACs, and a re-created container gets a new lease (engine 28.5 and older send none)", "pool", rec.ID, "parent", rec.Parent)
		})
		return ask, nil
	}
	mac, err := NameMAC(ctx, m.host, rec.Parent, 0, name)
	if err != nil {
		return ask, err
	}
	ask.mac = mac
	if !rec.NoHostname {
		if h, ok := lanmac.HostLabel(name); ok {
			ask.hostname = h
		} else {
			m.log.Warn("container name is no DNS label: not told to the LAN as a host name", "pool", rec.ID, "name", name)
		}
	}
	return ask, nil
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

// nameFree refuses a name whose MAC is in use on the parent: held by a
// live endpoint (a running container that was renamed, and another now
// has its old name), or leased on another DHCP pool of the same family
// on the parent (one container on two DHCP networks of one parent). A
// lease record whose endpoint is gone, or that no endpoint took within
// staleLease, is stale and counts for nothing.
func (m *IPAM) nameFree(rec store.IPAMPool, name string) error {
	if name == "" {
		return nil
	}
	now := m.now()
	return m.store.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		if err != nil {
			return err
		}
		for _, p := range pools {
			if !p.DHCP || p.Parent != rec.Parent {
				continue
			}
			for _, a := range tx.IPAMAddresses(p.ID) {
				l, ok, err := tx.IPAMLease(p.ID, a)
				if err != nil {
					m.log.Warn("unreadable IPAM lease record: it counts for nothing", "pool", p.ID, "address", a, "error", err)
					continue
				}
				if !ok || l.Name != name {
					continue
				}
				live, err := leaseLive(tx, l, now)
				if err != nil || !live {
					continue
				}
				where := fmt.Sprintf("the DHCP pool %s (%s)", p.ID, p.Prefix)
				if l.NetworkID != "" {
					where = fmt.Sprintf("network %s (%s)", dockerid.Short(l.NetworkID), p.Prefix)
				}
				switch {
				case p.ID != rec.ID && (v6(p) == v6(rec) || l.EndpointID != ""):
					return fmt.Errorf("%w: container %q has its name's MAC %s on parent %s already, with address %s on %s: a name has one MAC per parent, so one container can be on one DHCP network of a parent (or a container renamed while it runs still holds the name): disconnect it from that network, stop the renamed one, or use another name",
						pluginapi.ErrConflict, name, l.MAC, rec.Parent, a, where)
				case l.EndpointID != "":
					return fmt.Errorf("%w: container name %q has its name's MAC %s on parent %s, held by endpoint %s of %s (address %s): a container renamed while it runs keeps it; stop that container, or give this one another name",
						pluginapi.ErrConflict, name, l.MAC, rec.Parent, dockerid.Short(l.EndpointID), where, a)
				}
			}
		}
		return nil
	})
}

// staleLease is how long a lease no endpoint took over counts as being on
// its way to one (RequestAddress to CreateEndpoint takes milliseconds).
const staleLease = time.Minute

// leaseLive says whether a lease record is in use: its endpoint exists,
// or, taken over by none, it was leased less than staleLease ago.
func leaseLive(tx *store.Tx, l store.IPAMLease, now time.Time) (bool, error) {
	if l.EndpointID != "" {
		_, ok, err := tx.Endpoint(l.NetworkID, l.EndpointID)
		return ok, err
	}
	var acquired time.Time
	switch {
	case l.Lease != nil:
		acquired = l.Lease.Acquired
	case l.Lease6 != nil:
		acquired = l.Lease6.Acquired
	}
	return now.Sub(acquired) < staleLease, nil
}

// v6 says whether p is an IPv6 pool.
func v6(p store.IPAMPool) bool {
	pfx, err := netip.ParsePrefix(p.Prefix)
	return err == nil && pfx.Addr().Is6()
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
// other holders'). Records the lease makes stale go first: those of the
// same name that no live endpoint holds (Docker's names are unique: it
// asks again), and one at the leased address that nothing holds any
// more, or that this name leased and no endpoint took (a request whose
// answer was lost): the server just gave that address to this client.
func (m *IPAM) commitLease(rec store.IPAMPool, r addrRequest, name string, l leased) (netip.Prefix, error) {
	r.want = l.addr
	r.lease = &l.rec
	now := m.now()
	var got netip.Prefix
	err := m.store.Batch(func(tx *store.Tx) error {
		for _, a := range tx.IPAMAddresses(rec.ID) {
			old, ok, err := tx.IPAMLease(rec.ID, a)
			if err != nil || !ok {
				continue
			}
			live, err := leaseLive(tx, old, now)
			if err != nil {
				return err
			}
			sameName := name != "" && old.Name == name
			atAddr := a == l.addr.String()
			if !(sameName && !live || atAddr && (!live || sameName && old.EndpointID == "")) {
				continue // a live one at the address: allocate refuses it
			}
			addr, err := netip.ParseAddr(a)
			if err != nil {
				continue
			}
			if err := m.nameReleased(tx, rec.ID, addr); err != nil {
				return err
			}
			if err := tx.DeleteIPAMAddress(rec.ID, a); err != nil {
				return err
			}
		}
		var err error
		if got, _, err = m.allocate(tx, r, true); err != nil {
			return err
		}
		return forgetJournaled(tx, rec.Parent, l.addr)
	})
	return got, err
}

// forgetJournaled drops the driver's journaled releases of addr on parent
// (of an endpoint deleted before a kill -9, or whose release failed): the
// same name asks with the same client identity, so that release would end
// the lease just taken.
func forgetJournaled(tx *store.Tx, parent string, addr netip.Addr) error {
	pending, err := tx.PendingReleases()
	if err != nil {
		return err
	}
	for _, p := range pending {
		a, err := netaddr.Parse(p.Addr())
		if p.Parent == parent && err == nil && a == addr {
			if err := tx.DeletePendingRelease(p.NetworkID, p.EndpointID, p.Addr()); err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseLease gives back the lease of an address no endpoint took over
// (ReleaseAddress after a CreateEndpoint that failed or never came).
func (m *IPAM) releaseLease(ctx context.Context, rec store.IPAMPool, l store.IPAMLease) {
	if l.EndpointID != "" {
		return
	}
	fam := m.family(l.Lease6 != nil)
	if fam.missing() {
		return
	}
	if back, err := fam.held(rec.Parent, l); err != nil {
		m.log.Warn("could not give back a lease no endpoint took", "pool", rec.ID, "name", l.Name, "error", err)
	} else {
		back.giveBack(ctx, m.log, "release")
	}
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
