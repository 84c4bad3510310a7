package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// The lifecycle of both families over the fake kernel and a real state
// file: each test runs once per family, through the same Leaser code.

// script is what a fake server of either family does: it offers its
// offers in order (or the one address asked for, when asked for one),
// and records what it is told.
type script struct {
	mu       sync.Mutex
	offers   []string // addresses, without a prefix length
	down     bool     // no answer to Acquire
	renewErr error
	renewed  int
	declined []string
	released []string
}

func (s *script) offer(only netip.Addr) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.down:
		return "", errors.New("test: no answer")
	case only.IsValid():
		return only.String(), nil
	case len(s.offers) == 0:
		return "", errors.New("test: no more offers")
	}
	a := s.offers[0]
	s.offers = s.offers[1:]
	return a, nil
}

func (s *script) renew() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewed++
	return s.renewErr
}

func (s *script) note(list *[]string, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*list = append(*list, addr)
}

func (s *script) seen(list *[]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(*list)
}

// fake4 is a DHCP client over a script: leases of an hour.
type fake4 struct {
	*script
	now func() time.Time
}

func (f fake4) lease(addr string) record.Lease {
	now := f.now()
	return record.Lease{Addr: addr + "/24", Acquired: now, T1: now.Add(30 * time.Minute), T2: now.Add(52*time.Minute + 30*time.Second), Expiry: now.Add(time.Hour), ServerID: "192.0.2.1"}
}

func (f fake4) Acquire(_ context.Context, r Request) (record.Lease, error) {
	a, err := f.offer(r.Only)
	if err != nil {
		return record.Lease{}, err
	}
	return f.lease(a), nil
}

func (f fake4) Renew(_ context.Context, _ Request, l record.Lease) (record.Lease, error) {
	if err := f.renew(); err != nil {
		return record.Lease{}, err
	}
	return f.lease(Addr(l).String()), nil
}

func (f fake4) Release(_ context.Context, _ Request, l record.Lease) error {
	f.note(&f.released, Addr(l).String())
	return nil
}

func (f fake4) Decline(_ context.Context, _ Request, l record.Lease) error {
	f.note(&f.declined, Addr(l).String())
	return nil
}

// fake6 is a DHCPv6 client over a script: leases of an hour.
type fake6 struct {
	*script
	now func() time.Time
}

func (f fake6) lease(addr string, r dhcp6.Request) dhcp6.Lease {
	return dhcp6.Lease{Addr: netip.MustParseAddr(addr), IAID: r.IAID, ServerID: []byte{0, 3, 0, 1, 2, 0, 0, 0, 0, 1}, Acquired: f.now(),
		T1: 30 * time.Minute, T2: 48 * time.Minute, Preferred: time.Hour, Valid: time.Hour}
}

func (f fake6) Acquire(_ context.Context, r dhcp6.Request) (dhcp6.Lease, error) {
	a, err := f.offer(r.Hint)
	if err != nil {
		return dhcp6.Lease{}, err
	}
	return f.lease(a, r), nil
}

func (f fake6) Renew(_ context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error) {
	if err := f.renew(); err != nil {
		return dhcp6.Lease{}, err
	}
	return f.lease(l.Addr.String(), r), nil
}

func (f fake6) Rebind(ctx context.Context, l dhcp6.Lease, r dhcp6.Request) (dhcp6.Lease, error) {
	return f.Renew(ctx, l, r)
}

func (f fake6) Release(_ context.Context, l dhcp6.Lease, _ dhcp6.Request) error {
	f.note(&f.released, l.Addr.String())
	return nil
}

func (f fake6) Decline(_ context.Context, l dhcp6.Lease, _ dhcp6.Request) error {
	f.note(&f.declined, l.Addr.String())
	return nil
}

// life is the fixture: a DHCP and DHCPv6 network on eth0 of a fake
// kernel, a real state file, a clock, and the leasers over both fakes.
type life struct {
	db     *store.DB
	k      *nltest.Kernel
	clock  *fakeclock.Clock
	s4, s6 *script
	cfg    Config
	ls     *Leases
	n      record.Network
	ep     record.Endpoint
}

const tag = "underlay:test"

func newLife(t *testing.T) *life {
	t.Helper()
	f := &life{db: drivertest.Store(t), k: nltest.New(), clock: fakeclock.New(t0), s4: &script{}, s6: &script{}}
	f.k.AddLink(kernel.Link{Name: "eth0", Kind: "device", MTU: 1500, MAC: parentMAC})
	f.n = dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	f.n.Options[config.OptIPv6Mode] = config.IPv6DHCPv6
	f.ep = record.Endpoint{NetworkID: f.n.ID, ID: "e1" + strings.Repeat("0", 62), Link: config.EndpointLinkName("e1"), MAC: epMAC}
	drivertest.Put(t, f.db, []record.Network{f.n})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.cfg = Config{Store: f.db, Links: f.k, DHCP: fake4{f.s4, f.clock.Now}, DHCPv6: fake6{f.s6, f.clock.Now}, Blocker: f.k, Mark: tag,
		Log: slog.New(slog.DiscardHandler), Now: f.clock.Now, Stop: stop, Locks: keylock.New()}
	f.ls = New(f.cfg)
	return f
}

// lockEndpoint reads the records as the driver's does (no other request
// runs here).
func (f *life) lockEndpoint(ctx context.Context, netID, epID string) (context.Context, func(), *record.Network, *record.Endpoint, error) {
	var n *record.Network
	var ep *record.Endpoint
	err := f.db.View(func(tx *store.Tx) error {
		nv, nok, nerr := tx.Network(netID)
		ev, eok, eerr := tx.Endpoint(netID, epID)
		if nok {
			n = &nv
		}
		if nok && eok {
			ep = &ev
		}
		return errors.Join(nerr, eerr)
	})
	return ctx, func() {}, n, ep, err
}

func (f *life) record(t *testing.T) record.Endpoint {
	t.Helper()
	_, _, _, ep, err := f.lockEndpoint(context.Background(), f.n.ID, f.ep.ID)
	if err != nil || ep == nil {
		t.Fatalf("endpoint's record: %v, %v", ep, err)
	}
	return *ep
}

func (f *life) pending(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range pendingIn(t, f.db) {
		out = append(out, strings.TrimSuffix(p.Addr(), "/24"))
	}
	return out
}

func (f *life) blocked(t *testing.T) []string {
	t.Helper()
	b, err := f.k.BlockedAddrs(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range b {
		out = append(out, x.Parent+" "+x.Addr.String())
	}
	return out
}

// family is one family's side of a test: its leaser, its script, three
// addresses its server offers, and how to refuse a renewal.
type family[L, R any] struct {
	ls      func(*life) *Leaser[L, R]
	s       func(*life) *script
	addrs   [3]string
	refusal error
}

var (
	v4 = family[record.Lease, Request]{ls: func(f *life) *V4 { return f.ls.V4 }, s: func(f *life) *script { return f.s4 },
		addrs: [3]string{"192.0.2.10", "192.0.2.11", "192.0.2.12"}, refusal: fmt.Errorf("test: %w", ErrNAK)}
	v6 = family[record.Lease6, dhcp6.Request]{ls: func(f *life) *V6 { return f.ls.V6 }, s: func(f *life) *script { return f.s6 },
		addrs: [3]string{"2001:db8::10", "2001:db8::11", "2001:db8::12"}, refusal: fmt.Errorf("test: %w", dhcp6.ErrNoBinding)}
)

// TestAcquireDeclines: an offer the driver's check says is not free is
// declined and another asked for, up to plan.MaxDeclines; an offer the
// check cannot judge is given back.
func TestAcquireDeclines(t *testing.T) {
	t.Run("DHCP", func(t *testing.T) { testAcquireDeclines(t, v4) })
	t.Run("DHCPv6", func(t *testing.T) { testAcquireDeclines(t, v6) })
}

func testAcquireDeclines[L, R any](t *testing.T, fam family[L, R]) {
	a := fam.addrs
	for _, tc := range []struct {
		name         string
		taken        []string // addresses the check says another holds
		broken       string   // the address the check cannot judge
		want         string   // the address leased ("": none)
		wantDeclined []string
		wantReleased []string
		wantErr      error
	}{
		{name: "free at once", want: a[0]},
		{name: "the first offer taken, declined", taken: a[:1], want: a[1], wantDeclined: a[:1]},
		{name: "each offer taken: a conflict after MaxDeclines", taken: a[:], wantDeclined: a[:], wantErr: pluginapi.ErrConflict},
		{name: "an offer the check cannot judge, given back", broken: a[0], wantReleased: a[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLife(t)
			ls, s := fam.ls(f), fam.s(f)
			s.offers = a[:]
			claimed := 0
			free := func(_ context.Context, addr netip.Addr) (string, func(), error) {
				switch {
				case addr.String() == tc.broken:
					return "", nil, errors.New("test: the probe broke")
				case slices.Contains(tc.taken, addr.String()):
					return "a host on the LAN answered for it", nil, nil
				}
				claimed++
				return "", func() { claimed-- }, nil
			}
			l, release, err := ls.Acquire(context.Background(), f.n, f.ep, free)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Acquire = %v, want %v", err, tc.wantErr)
			case tc.want == "" && err == nil:
				t.Fatalf("Acquire leased %v, want an error", ls.Family.Facts(l).Addr)
			case tc.want != "" && (err != nil || ls.Family.Facts(l).Addr.String() != tc.want):
				t.Fatalf("Acquire = %v, %v; want %s", ls.Family.Facts(l).Addr, err, tc.want)
			}
			if tc.wantErr != nil {
				for _, d := range tc.wantDeclined {
					if !strings.Contains(err.Error(), d) {
						t.Errorf("the refusal does not name the declined %s: %v", d, err)
					}
				}
			}
			if got := s.seen(&s.declined); !slices.Equal(got, tc.wantDeclined) {
				t.Errorf("declined %v, want %v", got, tc.wantDeclined)
			}
			if got := s.seen(&s.released); !slices.Equal(got, tc.wantReleased) {
				t.Errorf("released %v, want %v", got, tc.wantReleased)
			}
			release()
			if claimed != 0 {
				t.Errorf("%d claims left after release", claimed)
			}
		})
	}
}

// leased acquires a lease for the fixture's endpoint and returns the
// endpoint holding it.
func leased[L, R any](t *testing.T, f *life, fam family[L, R]) record.Endpoint {
	t.Helper()
	ls := fam.ls(f)
	fam.s(f).offers = fam.addrs[:1]
	l, release, err := ls.Acquire(context.Background(), f.n, f.ep, func(context.Context, netip.Addr) (string, func(), error) { return "", func() {}, nil })
	if err != nil {
		t.Fatal(err)
	}
	release()
	return ls.Family.With(f.ep, &l)
}

// TestJournalLifecycle: a lease acquired is journaled until the endpoint's commit
// holds it; one a crash left without a record is released at the next
// start, and forgotten.
func TestJournalLifecycle(t *testing.T) {
	t.Run("DHCP", func(t *testing.T) { testJournalLifecycle(t, v4) })
	t.Run("DHCPv6", func(t *testing.T) { testJournalLifecycle(t, v6) })
}

func testJournalLifecycle[L, R any](t *testing.T, fam family[L, R]) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprint("crash=", crash), func(t *testing.T) {
			f := newLife(t)
			ep := leased(t, f, fam)
			ls := fam.ls(f)
			if err := ls.Journal(context.Background(), f.n, ep); err != nil {
				t.Fatal(err)
			}
			if got := f.pending(t); !slices.Equal(got, fam.addrs[:1]) {
				t.Fatalf("journal %v after Journal, want %v", got, fam.addrs[:1])
			}
			if !crash {
				if err := f.db.Batch(func(tx *store.Tx) error {
					if err := ls.Pending(tx, f.n, ep); err != nil {
						return err
					}
					return tx.PutEndpoint(ep)
				}); err != nil {
					t.Fatal(err)
				}
				if got := f.pending(t); len(got) != 0 {
					t.Fatalf("journal %v after the endpoint's commit, want none", got)
				}
			}
			// The next start: a new daemon over the same state file.
			fam.ls(&life{ls: New(f.cfg)}).releaseJournaled(context.Background())
			want := []string(nil)
			if crash {
				want = fam.addrs[:1]
			}
			if got := fam.s(f).seen(&fam.s(f).released); !slices.Equal(got, want) {
				t.Fatalf("released %v at the next start, want %v", got, want)
			}
			if got := f.pending(t); len(got) != 0 {
				t.Fatalf("journal %v after the next start, want none", got)
			}
		})
	}
}

// TestRenewCommits: a lease due is renewed and the renewal recorded in
// the endpoint's record; the next action is scheduled from it.
func TestRenewCommits(t *testing.T) {
	t.Run("DHCP", func(t *testing.T) { testRenewCommits(t, v4) })
	t.Run("DHCPv6", func(t *testing.T) { testRenewCommits(t, v6) })
}

// recorded is the fixture with its endpoint recorded holding a lease of
// fam's, and what a test of it uses.
func recorded[L, R any](t *testing.T, fam family[L, R]) (*life, *Leaser[L, R], *script, Key) {
	t.Helper()
	f := newLife(t)
	drivertest.Put(t, f.db, nil, leased(t, f, fam))
	return f, fam.ls(f), fam.s(f), Key{f.n.ID, f.ep.ID}
}

func testRenewCommits[L, R any](t *testing.T, fam family[L, R]) {
	f, ls, s, k := recorded(t, fam)
	f.clock.Advance(40 * time.Minute) // past T1
	ls.Renew(context.Background(), k)
	rec := f.record(t)
	got := ls.Family.Facts(*ls.Family.Of(rec))
	if s.renewed != 1 || !got.Acquired.Equal(f.clock.Now()) || !got.Lost.IsZero() {
		t.Fatalf("after Renew: %d renewals, recorded %+v; want one, acquired now", s.renewed, got)
	}
	if at, ok := ls.Timers().Due(k); !ok || !at.Equal(ls.Family.Next(*ls.Family.Of(rec), f.clock.Now())) || !at.After(f.clock.Now()) {
		t.Fatalf("next action at %v (%v), want the renewed lease's", at, ok)
	}
}

// TestLossBlocksAndWinsBack: a lease the server refuses is lost: the
// record says so, the address is blocked on the parent, and asked for
// again every lostLeaseRetry; won back, the block goes.
func TestLossBlocksAndWinsBack(t *testing.T) {
	t.Run("DHCP", func(t *testing.T) { testLossBlocksAndWinsBack(t, v4) })
	t.Run("DHCPv6", func(t *testing.T) { testLossBlocksAndWinsBack(t, v6) })
}

func testLossBlocksAndWinsBack[L, R any](t *testing.T, fam family[L, R]) {
	f, ls, s, k := recorded(t, fam)
	s.renewErr, s.down = fam.refusal, true
	f.clock.Advance(40 * time.Minute)
	ls.Renew(context.Background(), k)
	lost := ls.Family.Facts(*ls.Family.Of(f.record(t)))
	if lost.Lost.IsZero() || lost.LostWhy == "" {
		t.Fatalf("after a refusal the record holds %+v, want it lost with why", lost)
	}
	if got, want := f.blocked(t), []string{"eth0 " + fam.addrs[0]}; !slices.Equal(got, want) {
		t.Fatalf("blocked %v, want %v", got, want)
	}
	if at, _ := ls.Timers().Due(k); !at.Equal(f.clock.Now().Add(lostLeaseRetry)) {
		t.Fatalf("a lost lease is asked for again at %v, want in %v", at.Sub(f.clock.Now()), lostLeaseRetry)
	}
	s.mu.Lock()
	s.down = false
	s.mu.Unlock()
	f.clock.Advance(lostLeaseRetry)
	ls.Renew(context.Background(), k)
	back := ls.Family.Facts(*ls.Family.Of(f.record(t)))
	if !back.Lost.IsZero() || back.Addr.String() != fam.addrs[0] {
		t.Fatalf("after winning it back the record holds %+v, want %s held", back, fam.addrs[0])
	}
	if got := f.blocked(t); len(got) != 0 {
		t.Fatalf("blocked %v after winning it back, want none", got)
	}
	// Deleting the endpoint of a lost lease removes its block, releases nothing.
	s.renewErr, s.down = fam.refusal, true
	f.clock.Advance(time.Hour)
	ls.Renew(context.Background(), k)
	ls.Forget(context.Background(), f.n, f.record(t))
	ls.Wait()
	if got := f.blocked(t); len(got) != 0 {
		t.Fatalf("blocked %v after the endpoint went, want none", got)
	}
	if got := s.seen(&s.released); len(got) != 0 {
		t.Fatalf("released %v: a lost lease is not the daemon's to release", got)
	}
}
