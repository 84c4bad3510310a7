package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// The LAN preflight at CreateNetwork (docs/troubleshooting.md, Troubleshooting the LAN).
// What is certain and cheap is refused at once (refuseOnLAN: macvlan on a
// wireless parent); the rest (lancheck.Run: new MACs, DHCP, router
// advertisements, the gateway...) runs in the background after the create
// has been answered (one at a time, once the creates settle), bounded by
// LANCheckTimeout, and its latest result per
// network is kept in memory: logged once at WARN when it has problems,
// counted by LANCheckCounts (underlay_lan_check) and shown by underlay ls
// and doctor (Inventory).

// LANCheckTimeout bounds one network's background LAN preflight.
const LANCheckTimeout = 5 * time.Second

// LANChecker runs the LAN preflight of a network within ctx's deadline
// (lancheck.Run over the host's kernel, in the serve wiring).
type LANChecker func(ctx context.Context, n lancheck.Network) []lancheck.Item

// refuseOnLAN refuses what the LAN preflight is certain of at once:
// macvlan on a wireless parent, unless allow_wireless=true
// (lancheck.Refuse). Only Get says whether a link is wireless: the
// resolver's lookup is read when it made one, else the parent (or the base
// of a VLAN underlay is to make) is looked up. A VLAN's own sysfs entry
// never says wireless: its base's does (a VLAN of a VLAN: the link at the
// bottom). ipvlan, allow_wireless and internal networks need no lookup.
func (c *creation) refuseOnLAN(ctx context.Context) error {
	n := LANNetwork(c.want)
	if n.Type == kernel.KindIpvlan || n.AllowWireless || c.want.Internal || config.IsDummyName(c.res.Name) {
		return nil
	}
	var l kernel.Link
	var err error
	switch {
	case c.res.Create != nil && c.res.Create.Kind == kernel.KindVLAN:
		l, err = c.d.links.Get(ctx, c.res.Create.Base)
	case c.res.Create != nil:
		return nil
	case c.res.Link != nil:
		l = *c.res.Link
	default:
		l, err = c.d.links.Get(ctx, c.res.Name)
	}
	for range maxVLANDepth {
		if errors.Is(err, netlinkutil.ErrNotFound) {
			return nil // gone since the resolution, or a VLAN without its base: the create says so
		} else if err != nil {
			return fmt.Errorf("look up parent %s (or a link below it) for the wireless check: %w", c.res.Name, err)
		}
		if err := lancheck.Refuse(n, l); err != nil {
			if l.Name != c.res.Name {
				err = fmt.Errorf("parent %s is a VLAN on %s: %w", c.res.Name, l.Name, err)
			}
			return c.refusal(err)
		}
		if l.Kind != kernel.KindVLAN || l.ParentIndex <= 0 {
			return nil
		}
		var base kernel.Link
		if base, err = c.d.links.LinkByIndex(ctx, l.ParentIndex); err == nil {
			l, err = c.d.links.Get(ctx, base.Name)
		}
	}
	return nil
}

// maxVLANDepth bounds the VLANs on VLANs the wireless check walks down.
const maxVLANDepth = 4

// refusal words Refuse's error as the request named the parent, when that
// was not the link itself (a list, auto, an altname).
func (c *creation) refusal(err error) error {
	if c.asked != "" && c.asked != c.res.Name {
		return config.Invalidf("parent %q resolved to %s on this host: %w; or name a wired link in -o parent", c.asked, c.res.Name, err)
	}
	return config.Invalidf("%w", err)
}

// lanPreflight runs the background LAN preflights and keeps their latest
// results, by network ID. One worker runs them one at a time, in the order
// of the creates, each once no create has come for lanCheckSettle: a burst
// of creates (docker compose up) is not slowed by the preflights' kernel
// work (a throwaway child's namespace and link, packet sockets), and two
// preflights never probe the same LAN at once, which would take each
// other's probes for answers. Its methods are safe for concurrent use;
// Start and Drop of one network are serialized by the network's lock.
type lanPreflight struct {
	run     LANChecker
	timeout time.Duration
	settle  time.Duration
	log     *slog.Logger
	now     func() time.Time
	// ctx is cancelled at close; wg counts the worker.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	mu      sync.Mutex
	closed  bool
	started bool
	byID    map[string]*lanResult
	// queue are the results waiting to run, oldest first (an entry no
	// longer in byID was dropped or replaced: skipped).
	queue []*lanResult
	// last is when the last create was answered.
	last time.Time
}

// lanResult is one network's preflight: queued, running (cancel set),
// then done.
type lanResult struct {
	n      record.Network
	ctx    context.Context
	cancel context.CancelFunc
	done   bool
	items  []lancheck.Item
}

// lanCheckSettle is how long the preflights wait after a create before
// the next one starts.
const lanCheckSettle = 200 * time.Millisecond

func newLANPreflight(run LANChecker, timeout, settle time.Duration, log *slog.Logger) *lanPreflight {
	ctx, cancel := context.WithCancel(context.Background())
	return &lanPreflight{run: run, timeout: timeout, settle: settle, log: log, now: time.Now, ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), byID: map[string]*lanResult{}}
}

// wanted reports whether a network just created gets a background
// preflight: a runner is configured, lan_check is not false, and the
// network has a LAN (not an internal network's dummy parent).
func (p *lanPreflight) wanted(n record.Network) bool {
	return p.run != nil && !n.Config.NoLANCheck && !n.Internal && !config.IsDummyName(n.Parent)
}

// Start queues n's preflight (replacing a queued, running or finished one
// of the same ID) and returns at once.
func (p *lanPreflight) Start(n record.Network) {
	if !p.wanted(n) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.dropLocked(n.ID)
	r := &lanResult{n: n}
	p.byID[n.ID] = r
	p.queue = append(p.queue, r)
	p.last = p.now()
	if !p.started {
		p.started = true
		p.wg.Add(1)
		go p.work()
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// work runs the queued preflights until close.
func (p *lanPreflight) work() {
	defer p.wg.Done()
	for {
		r, wait := p.next()
		switch {
		case r != nil:
			p.runOne(r)
			continue
		case wait > 0:
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		select {
		case <-p.kick:
		case <-p.ctx.Done():
			return
		}
	}
}

// next takes the oldest queued preflight that is still wanted, once the
// creates have settled; else how long to wait for them (0: the queue is
// empty).
func (p *lanPreflight) next() (*lanResult, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) > 0 && !p.closed && p.ctx.Err() == nil {
		r := p.queue[0]
		if p.byID[r.n.ID] != r {
			p.queue = p.queue[1:]
			continue
		}
		if wait := p.last.Add(p.settle).Sub(p.now()); wait > 0 {
			return nil, wait
		}
		p.queue = p.queue[1:]
		r.ctx, r.cancel = context.WithTimeout(p.ctx, p.timeout)
		return r, 0
	}
	return nil, 0
}

// runOne runs a preflight and keeps its result unless it was dropped or
// replaced meanwhile.
func (p *lanPreflight) runOne(r *lanResult) {
	defer r.cancel()
	items := p.run(r.ctx, LANNetwork(r.n))
	if errors.Is(r.ctx.Err(), context.Canceled) {
		// Cancelled (dropped, replaced, or the driver closing), not timed
		// out: what it saw is cut short and proves nothing.
		return
	}
	p.mu.Lock()
	current := p.byID[r.n.ID] == r
	if current {
		r.items, r.done = items, true
	}
	p.mu.Unlock()
	if current {
		p.report(r.n, items)
	}
}

// report logs one WARN line for a result with problems, each problem's
// check, evidence and fix as a group named after the check (and family).
func (p *lanPreflight) report(n record.Network, items []lancheck.Item) {
	var names []string
	attrs := []any{"network", n.ID, "parent", n.Parent}
	for _, it := range items {
		if it.Verdict != lancheck.Problem {
			continue
		}
		name := it.Name()
		names = append(names, name)
		attrs = append(attrs, slog.Group(name, "check", string(it.Check), "evidence", it.Evidence, "fix", it.Fix))
	}
	if len(names) == 0 {
		p.log.Debug("LAN preflight found no problem", "network", n.ID, "parent", n.Parent, "items", len(items))
		return
	}
	attrs = append(attrs, "problems", strings.Join(names, ","))
	p.log.Warn("LAN preflight found problems: containers of the network may not reach the LAN (underlay doctor --lan "+n.Parent+" says more)", attrs...)
}

// Drop cancels a network's queued or running preflight and forgets its
// result.
func (p *lanPreflight) Drop(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked(id)
}

func (p *lanPreflight) dropLocked(id string) {
	if r := p.byID[id]; r != nil {
		if r.cancel != nil {
			r.cancel()
		}
		delete(p.byID, id)
	}
}

// Results are the finished preflights' items by network ID.
func (p *lanPreflight) Results() map[string][]lancheck.Item {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]lancheck.Item{}
	for id, r := range p.byID {
		if r.done {
			out[id] = append([]lancheck.Item{}, r.items...)
		}
	}
	return out
}

// Counts are, for every check and verdict, the number of networks whose
// latest preflight gave that verdict for that check (a check with an item
// per family counts a network once per verdict).
func (p *lanPreflight) Counts() map[[2]string]int {
	out := map[[2]string]int{}
	for _, c := range lancheck.Checks {
		for _, v := range []lancheck.Verdict{lancheck.OK, lancheck.Problem, lancheck.Unknown} {
			out[[2]string{string(c), string(v)}] = 0
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.byID {
		seen := map[[2]string]bool{}
		for _, it := range r.items {
			k := [2]string{string(it.Check), string(it.Verdict)}
			if !seen[k] {
				seen[k] = true
				out[k]++
			}
		}
	}
	return out
}

// close cancels the running preflight and waits for it; none starts
// after.
func (p *lanPreflight) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// LANChecks are the latest background LAN preflight's items of each
// network that has a finished one, by network ID.
func (d *Driver) LANChecks() map[string][]lancheck.Item { return d.lanChecks.Results() }

// LANCheckCounts are, by check and verdict, the networks whose latest LAN
// preflight gave that verdict for that check, every check and verdict
// present (0 when none): the gauge underlay_lan_check (metrics.LANChecks).
func (d *Driver) LANCheckCounts() map[[2]string]int { return d.lanChecks.Counts() }
