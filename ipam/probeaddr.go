package ipam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store"
)

// maxRaces bounds how often a request chooses again because the address
// it probed was taken meanwhile (a concurrent --ip request).
const maxRaces = 8

// requestProbed is RequestAddress without an address on a pool that may
// be a LAN pool (lan.go): choose (outside any write), claim, probe, then
// record in a transaction that checks the address is still free.
func (m *IPAM) requestProbed(ctx context.Context, r addrRequest, addrs []kernel.Addr) (netip.Prefix, error) {
	var rec store.IPAMPool
	if err := m.store.View(func(tx *store.Tx) (err error) {
		rec, _, err = tx.IPAMPool(r.poolID)
		return err
	}); err != nil {
		return netip.Prefix{}, err
	}
	pool, err := netip.ParsePrefix(rec.Prefix)
	budget := probeBudget(rec)
	if err != nil || budget == 0 {
		return m.commitAddress(r) // an unknown pool is refused there
	}
	link, ok, err := m.poolLAN(ctx, rec, pool, addrs)
	if err != nil {
		return netip.Prefix{}, err
	}
	if !ok {
		return m.commitAddress(r)
	}
	mac, _ := net.ParseMAC(link.MAC) // lanLink checked it
	var conflicts []*probe.ConflictError
	for races := 0; ; {
		now := m.now()
		for k, e := range m.skips.expire(now) {
			m.log.Info("address no longer remembered as in use on the LAN: it may be handed out again, after a probe", "link", k.link, "address", k.addr, "mac", e.mac)
		}
		r.skip = func(a netip.Addr) bool { return m.skips.skipped(link.Name, a, now) || m.inflight.has(r.poolID, a) }
		var pick netip.Prefix
		var kind addrKind
		if err := m.store.View(func(tx *store.Tx) (err error) {
			pick, kind, err = m.allocate(tx, r, false)
			return err
		}); err != nil {
			if len(conflicts) > 0 && errors.Is(err, pluginapi.ErrConflict) {
				return netip.Prefix{}, lanRefusal(rec, link.Name, conflicts, err)
			}
			if n, some := m.skips.count(link.Name, pool, now, 5); n > 0 && errors.Is(err, pluginapi.ErrConflict) {
				return netip.Prefix{}, fmt.Errorf("%w; %d of its addresses are skipped as in use on the LAN of %s (for up to %s after a host answered for them: %s): keep them out of the pool (--aux-address, or an --ip-range without them), or switch the probe off with --ipam-opt address_probe=0", err, n, link.Name, lanSkipFor, strings.Join(some, ", "))
			}
			return netip.Prefix{}, err
		}
		a := pick.Addr()
		if !m.inflight.claim(r.poolID, a) {
			continue // chosen by a concurrent request a moment ago
		}
		perr := m.probeOne(ctx, link.Name, mac, a, budget)
		var ce *probe.ConflictError
		switch {
		case errors.As(perr, &ce):
			m.inflight.release(r.poolID, a)
			if m.skips.add(link.Name, a, ce.MAC.String(), m.now().Add(lanSkipFor)) {
				m.log.Warn("address in use on the LAN: skipped, not handed out", "pool", r.poolID, "link", link.Name, "address", a,
					"mac", ce.MAC.String(), "seen", ce.Seen, "for", lanSkipFor)
			}
			m.probeEvents.AddressInUseOnLAN()
			if conflicts = append(conflicts, ce); len(conflicts) == maxLANConflicts {
				return netip.Prefix{}, lanRefusal(rec, link.Name, conflicts, nil)
			}
			continue
		case perr != nil && ctx.Err() != nil:
			m.inflight.release(r.poolID, a)
			return netip.Prefix{}, fmt.Errorf("probe address %s of pool %s on %s: %w", a, r.poolID, link.Name, perr)
		case perr != nil:
			m.log.Warn("could not probe an address on the LAN; handing it out unprobed", "pool", r.poolID, "link", link.Name, "address", a, "error", perr)
		}
		probed := r
		probed.probed = a
		var got netip.Prefix
		err := m.store.Batch(func(tx *store.Tx) (err error) {
			got, _, err = m.allocate(tx, probed, true)
			return err
		})
		m.inflight.release(r.poolID, a)
		if errors.Is(err, errRaced) && races < maxRaces {
			races++
			continue
		}
		if errors.Is(err, errRaced) {
			return netip.Prefix{}, fmt.Errorf("%w: pool %s: the addresses chosen were taken by other requests while they were probed, %d times: try again", pluginapi.ErrConflict, r.poolID, races+1)
		}
		if err != nil {
			return netip.Prefix{}, err
		}
		if perr == nil {
			m.memo.Probed(link.Name, a, budget)
		}
		m.log.Debug("address handed out", "pool", r.poolID, "address", got, "name", r.name, "kind", kind, "probed_on", link.Name)
		return got, nil
	}
}

// probeOne probes a on link from mac for budget.
func (m *IPAM) probeOne(ctx context.Context, link string, mac net.HardwareAddr, a netip.Addr, budget time.Duration) error {
	if a.Is4() {
		return m.prober.Probe(ctx, link, mac, a, budget)
	}
	return m.prober.ProbeIPv6(ctx, link, mac, a, budget)
}

// lanRefusal is the answer of a request whose addresses all answered on
// the LAN (or, with last, whose pool has none left but those).
func lanRefusal(rec store.IPAMPool, link string, conflicts []*probe.ConflictError, last error) error {
	var held []string
	for _, c := range conflicts {
		held = append(held, fmt.Sprintf("%s by MAC %s", c.Addr, c.MAC))
	}
	why := fmt.Sprintf("the %d addresses it probed are", len(conflicts))
	if last != nil {
		why = fmt.Sprintf("no free address is left but the %d it probed, which are", len(conflicts))
	}
	return fmt.Errorf("%w: pool %s (%s): %s in use on the LAN of %s (answered for: %s); they are not handed out for %s: keep them out of the pool (--aux-address name=ADDRESS, or an --ip-range without them), give the container --ip, or switch the probe off with --ipam-opt address_probe=0",
		pluginapi.ErrConflict, rec.ID, rec.Prefix, why, link, strings.Join(held, ", "), lanSkipFor)
}

// poolLAN is the LAN link of a pool (lanLink), listing the host's links
// only for a pool that can have one: a parent pool, or one a host address
// is near.
func (m *IPAM) poolLAN(ctx context.Context, rec store.IPAMPool, pool netip.Prefix, addrs []kernel.Addr) (kernel.Link, bool, error) {
	if rec.Parent == "" && !nearHost(pool, addrs) {
		return kernel.Link{}, false, nil
	}
	links, err := m.lanCandidates(ctx, rec, addrs)
	if err != nil {
		return kernel.Link{}, false, err
	}
	l, ok := lanLink(rec, pool, links, addrs)
	return l, ok, nil
}

// lanCandidates reads the links lanLink chooses among: the pool's parent,
// or the links of the host's addresses near the pool (addrs).
func (m *IPAM) lanCandidates(ctx context.Context, rec store.IPAMPool, addrs []kernel.Addr) ([]kernel.Link, error) {
	if rec.Parent != "" {
		l, err := m.host.Get(ctx, rec.Parent)
		if errors.Is(err, netlinkutil.ErrNotFound) {
			return nil, nil
		}
		return []kernel.Link{l}, err
	}
	var out []kernel.Link
	seen := map[int]bool{}
	for _, a := range addrs {
		if seen[a.LinkIndex] {
			continue
		}
		seen[a.LinkIndex] = true
		l, err := m.host.LinkByIndex(ctx, a.LinkIndex)
		if errors.Is(err, netlinkutil.ErrNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// probeWanted probes an address asked for (--ip) on a LAN pool before it
// is recorded, and refuses it when a LAN host answers for it: the
// driver's probe at CreateEndpoint is on by default only where the
// host's own routes say the subnet is the parent's LAN, which a
// --ipam-opt parent= pool on a link without a host address is not. An
// address the pool already holds, or outside it, is left to allocate's
// refusal (no probe: an endpoint of ours would answer for it).
func (m *IPAM) probeWanted(ctx context.Context, r addrRequest, addrs []kernel.Addr) error {
	var rec store.IPAMPool
	free := false
	if err := m.store.View(func(tx *store.Tx) (err error) {
		var ok bool
		if rec, ok, err = tx.IPAMPool(r.poolID); err != nil || !ok {
			return err
		}
		_, _, aerr := m.allocate(tx, r, false)
		free = aerr == nil
		return nil
	}); err != nil {
		return err
	}
	pool, err := netip.ParsePrefix(rec.Prefix)
	budget := probeBudget(rec)
	if !free || err != nil || budget == 0 {
		return nil
	}
	link, ok, err := m.poolLAN(ctx, rec, pool, addrs)
	if err != nil || !ok {
		return err
	}
	mac, _ := net.ParseMAC(link.MAC)
	perr := m.probeOne(ctx, link.Name, mac, r.want, budget)
	var ce *probe.ConflictError
	switch {
	case errors.As(perr, &ce):
		m.probeEvents.AddressInUseOnLAN()
		m.log.Warn("address asked for is in use on the LAN: refused", "pool", r.poolID, "link", link.Name, "address", r.want, "mac", ce.MAC.String(), "seen", ce.Seen)
		return fmt.Errorf("%w: pool %s (%s): address %s is in use on the LAN of %s: the host with MAC %s answered for it (%s): run the container with another --ip, or keep %s out of the pool (--aux-address name=%s, or an --ip-range without it); or switch the probe off with --ipam-opt address_probe=0",
			pluginapi.ErrConflict, rec.ID, rec.Prefix, r.want, link.Name, ce.MAC, ce.Seen, r.want, r.want)
	case perr != nil && ctx.Err() != nil:
		return fmt.Errorf("probe address %s of pool %s on %s: %w", r.want, r.poolID, link.Name, perr)
	case perr != nil:
		m.log.Warn("could not probe an address on the LAN; handing it out unprobed", "pool", r.poolID, "link", link.Name, "address", r.want, "error", perr)
	default:
		m.memo.Probed(link.Name, r.want, budget)
	}
	return nil
}
