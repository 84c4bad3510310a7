package probe

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Memo remembers addresses probed clean a moment ago, so that one address
// is not probed twice in a row: the IPAM probes the address it is about
// to hand out (RequestAddress), and the driver's CreateEndpoint, which
// comes right after with that address, would probe it again. The daemon
// gives the IPAM the Memo and the driver the Memo's Wrap of its Prober.
// An entry serves one probe (Take), only within the Memo's window, and
// only a probe whose budget is no longer than the clean one's (a 300 ms
// probe does not stand in for a 2 s one).
// It is safe for concurrent use.
type Memo struct {
	window time.Duration
	now    func() time.Time

	mu  sync.Mutex
	at  map[memoKey]memoEntry
	max int
}

type memoEntry struct {
	at     time.Time
	budget time.Duration
}

type memoKey struct {
	parent string
	addr   netip.Addr
}

// NewMemo returns a memo whose entries serve a probe up to window after
// the clean probe (zero: 10 s); now is the clock (nil: time.Now).
func NewMemo(window time.Duration, now func() time.Time) *Memo {
	if window <= 0 {
		window = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Memo{window: window, now: now, at: map[memoKey]memoEntry{}, max: 4096}
}

// Probed records that addr was probed clean on parent just now, for
// budget.
func (m *Memo) Probed(parent string, addr netip.Addr, budget time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.at) >= m.max {
		for k, e := range m.at {
			if now.Sub(e.at) >= m.window {
				delete(m.at, k)
			}
		}
		if len(m.at) >= m.max {
			return // a burst of more than max probes a window: probe again
		}
	}
	m.at[memoKey{parent, addr.Unmap().WithZone("")}] = memoEntry{now, budget}
}

// Take reports whether addr was probed clean on parent within the
// window, for at least budget, and forgets it.
func (m *Memo) Take(parent string, addr netip.Addr, budget time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memoKey{parent, addr.Unmap().WithZone("")}
	e, ok := m.at[k]
	delete(m.at, k)
	return ok && m.now().Sub(e.at) < m.window && e.budget >= budget
}

// Memoized is a Prober whose Probe and ProbeIPv6 return nil at once for
// an address its Memo took (probed clean on the same parent within the
// window, for at least the budget asked); everything else is the
// Prober's.
type Memoized struct {
	*Prober
	Memo *Memo
}

// Wrap returns p with the memo in front of its probes.
func (m *Memo) Wrap(p *Prober) *Memoized { return &Memoized{Prober: p, Memo: m} }

// Probe is Prober.Probe unless the memo took addr.
func (p *Memoized) Probe(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	if budget > 0 && p.Memo.Take(parent, addr, budget) {
		return nil
	}
	return p.Prober.Probe(ctx, parent, mac, addr, budget)
}

// ProbeIPv6 is Prober.ProbeIPv6 unless the memo took addr.
func (p *Memoized) ProbeIPv6(ctx context.Context, parent string, mac net.HardwareAddr, addr netip.Addr, budget time.Duration) error {
	if budget > 0 && p.Memo.Take(parent, addr, budget) {
		return nil
	}
	return p.Prober.ProbeIPv6(ctx, parent, mac, addr, budget)
}
