package ipam

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
)

// Addresses someone else on the LAN answers for (issue 25 §2). On a LAN
// pool, a RequestAddress without an address probes the address it picked
// from the LAN's link before handing it out (ARP probes from 0.0.0.0; for
// IPv6 a DAD-style Neighbour Solicitation from ::, both from the link's
// MAC) and skips an address that answers: it is remembered, in memory,
// as in use on the LAN for lanSkipFor, and the next address is probed, up
// to maxLANConflicts per request. An address that was probed clean is
// told to the probe memo, so the driver's CreateEndpoint does not probe it
// again. A request for a given address (--ip) is probed by the driver at
// CreateEndpoint, which refuses it on a conflict.

const (
	// defaultProbe is the driver's default address_probe budget too.
	defaultProbe = probeopt.Default
	// maxLANConflicts is how many addresses one RequestAddress probes and
	// finds in use before it refuses.
	maxLANConflicts = 3
	// lanSkipFor is how long an address found in use is not handed out.
	lanSkipFor = 10 * time.Minute
	// maxLANSkips bounds the skip list (the soonest to expire go first).
	maxLANSkips = 4096
)

// Prober probes addresses on a link (probe.Prober). A conflict is an error
// wrapping probe.ErrConflict, a *probe.ConflictError.
type Prober interface {
	Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
	ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error
}

// ProbeMemo is told of addresses probed clean (probe.Memo).
type ProbeMemo interface {
	Probed(parent string, addr netip.Addr, budget time.Duration)
}

// ProbeEvents, when Config.Events implements it, is told of every address
// a probe found in use on the LAN (metrics).
type ProbeEvents interface {
	AddressInUseOnLAN()
}

// parseAddressProbe validates --ipam-opt address_probe and returns it in
// canonical form ("" when not given).
func parseAddressProbe(opts map[string]string) (string, error) {
	v, ok := opts[probeopt.Name]
	if !ok {
		return "", nil
	}
	d, ok := probeopt.Parse(v)
	if !ok {
		return "", invalidf("--ipam-opt address_probe=%s is not a duration from 0 (off) to %s: use for example --ipam-opt address_probe=300ms", v, probeopt.Max)
	}
	return d.String(), nil
}

// probeBudget is a pool's probe budget: its address_probe, else the
// default.
func probeBudget(rec store.IPAMPool) time.Duration {
	if rec.Probe == "" {
		return defaultProbe
	}
	d, ok := probeopt.Parse(rec.Probe)
	if !ok {
		return defaultProbe
	}
	return d
}

// lanLink is the link a pool's addresses are probed on: its parent's (a
// --ipam-opt parent= pool), or else the link of a host address in the
// pool's subnet (the host is on that LAN); none for other pools, the
// loopback and links without an Ethernet MAC.
func lanLink(rec store.IPAMPool, pool netip.Prefix, links []kernel.Link, addrs []kernel.Addr) (kernel.Link, bool) {
	ok := func(l kernel.Link) bool {
		mac, err := net.ParseMAC(l.MAC)
		return l.Ethernet() && !loopback(l) && err == nil && len(mac) == 6
	}
	if rec.Parent != "" {
		l, found := kernel.FindLink(links, rec.Parent)
		return l, found && ok(l)
	}
	for _, a := range addrs {
		if a.Prefix.Bits() == a.Prefix.Addr().BitLen() || !a.Prefix.Masked().Overlaps(pool) || a.Prefix.Addr().IsLinkLocalUnicast() {
			continue
		}
		for _, l := range links {
			if l.Index == a.LinkIndex && ok(l) {
				return l, true
			}
		}
	}
	return kernel.Link{}, false
}

// nearHost reports whether a host address's prefix overlaps pool (what
// lanLink looks for without a parent).
func nearHost(pool netip.Prefix, addrs []kernel.Addr) bool {
	for _, a := range addrs {
		if a.Prefix.Bits() != a.Prefix.Addr().BitLen() && a.Prefix.Masked().Overlaps(pool) && !a.Prefix.Addr().IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}

// lanSkips are the addresses found in use on a LAN, until when.
type lanSkips struct {
	mu sync.Mutex
	at map[skipKey]lanSkip
}

type skipKey struct {
	link string
	addr netip.Addr
}

type lanSkip struct {
	mac   string
	until time.Time
}

// live reports whether a skip still holds at now.
func (s lanSkip) live(now time.Time) bool { return now.Before(s.until) }

// add remembers addr on link as in use by mac until until; false when it
// already was.
func (s *lanSkips) add(link string, addr netip.Addr, mac string, until time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := skipKey{link, addr}
	_, had := s.at[k]
	if !had && len(s.at) >= maxLANSkips {
		var first skipKey
		for key, e := range s.at {
			if first == (skipKey{}) || e.until.Before(s.at[first].until) {
				first = key
			}
		}
		delete(s.at, first)
	}
	s.at[k] = lanSkip{mac: mac, until: until}
	return !had
}

// skipped reports whether addr on link is remembered as in use at now.
func (s *lanSkips) skipped(link string, addr netip.Addr, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.at[skipKey{link, addr}]
	return ok && e.live(now)
}

// count is how many addresses of pool on link are skipped at now, and up
// to max of them, lowest first, as "ADDRESS (MAC)".
func (s *lanSkips) count(link string, pool netip.Prefix, now time.Time, max int) (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []skipKey
	for k, e := range s.at {
		if k.link == link && pool.Contains(k.addr) && e.live(now) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b skipKey) int { return a.addr.Compare(b.addr) })
	var some []string
	for _, k := range keys[:min(len(keys), max)] {
		some = append(some, fmt.Sprintf("%s (%s)", k.addr, s.at[k].mac))
	}
	return len(keys), some
}

// expire forgets the skips over at now and returns them.
func (s *lanSkips) expire(now time.Time) map[skipKey]lanSkip {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[skipKey]lanSkip
	for k, e := range s.at {
		if !e.live(now) {
			if out == nil {
				out = map[skipKey]lanSkip{}
			}
			out[k] = e
			delete(s.at, k)
		}
	}
	return out
}

// inflight are the addresses picked and being probed, by pool, so that
// concurrent requests pick others.
type inflight struct {
	mu sync.Mutex
	at map[inflightKey]bool
}

type inflightKey struct {
	pool string
	addr netip.Addr
}

func (f *inflight) claim(pool string, a netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at[inflightKey{pool, a}] {
		return false
	}
	f.at[inflightKey{pool, a}] = true
	return true
}

func (f *inflight) has(pool string, a netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[inflightKey{pool, a}]
}

func (f *inflight) release(pool string, a netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.at, inflightKey{pool, a})
}
