package leases

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/internal/fakeclock"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

const (
	parentMAC = "52:54:00:00:00:01"
	epMAC     = "02:00:00:00:00:0a"
)

// released is one Release the client was asked for.
type released struct {
	r Request
	l record.Lease
}

// client is a lease client that records the releases asked; err, by
// address, fails them.
type client struct {
	mu       sync.Mutex
	releases []released
	err      map[string]error
}

func (c *client) Acquire(context.Context, Request) (record.Lease, error) {
	return record.Lease{}, errors.New("test: not acquiring")
}

func (c *client) Renew(context.Context, Request, record.Lease) (record.Lease, error) {
	return record.Lease{}, errors.New("test: not renewing")
}

func (c *client) Decline(context.Context, Request, record.Lease) error { return nil }

func (c *client) Release(ctx context.Context, r Request, l record.Lease) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("test: a release without a deadline")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releases = append(c.releases, released{r, l})
	return c.err[l.Addr]
}

func (c *client) addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.releases {
		out = append(out, r.l.Addr)
	}
	slices.Sort(out)
	return out
}

type journalFixture struct {
	db    *store.DB
	k     *nltest.Kernel
	c     *client
	clock *fakeclock.Clock
	ls    *V4
}

func newJournal(t *testing.T, withClient bool) *journalFixture {
	t.Helper()
	f := &journalFixture{db: drivertest.Store(t), k: nltest.New(), c: &client{err: map[string]error{}}, clock: fakeclock.New(t0)}
	f.k.AddLink(kernel.Link{Name: "eth0", Kind: "device", MTU: 1500, MAC: parentMAC})
	cfg := Config{Store: f.db, Links: f.k, Log: slog.New(slog.DiscardHandler), Now: f.clock.Now, Mark: "underlay:test"}
	if withClient {
		cfg.DHCP = f.c
	}
	f.ls = New(cfg).V4
	return f
}

func dhcpNet(id, typ string) record.Network {
	mode, flag := "bridge", ""
	if typ == kernel.KindIpvlan {
		mode, flag = "l2", "bridge"
	}
	n := drivertest.Record(id, typ, "eth0", mode, flag)
	n.Options = map[string]string{config.OptDHCP: "true"}
	return n
}

func leasedEndpoint(n record.Network, id, addr string) record.Endpoint {
	l := lease()
	l.Addr = addr
	return record.Endpoint{NetworkID: n.ID, ID: id, Link: config.EndpointLinkName(id), MAC: epMAC, IPv4: addr, Lease: &l}
}

func (f *journalFixture) pending(t *testing.T) []record.PendingRelease {
	t.Helper()
	return pendingIn(t, f.db)
}

// pendingIn is the journal in a state file.
func pendingIn(t *testing.T, db *store.DB) []record.PendingRelease {
	t.Helper()
	var out []record.PendingRelease
	if err := db.View(func(tx *store.Tx) (err error) {
		out, err = tx.PendingReleases()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *journalFixture) pendingAddrs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range f.pending(t) {
		out = append(out, p.Addr())
	}
	slices.Sort(out)
	return out
}

// TestJournal: a lease just acquired is journaled with what its release
// needs (the parent, the MAC, the client ID), and Unjournal forgets it.
func TestJournal(t *testing.T) {
	for _, tc := range []struct {
		typ      string
		mac      string
		clientID string
	}{
		{kernel.KindMacvlan, epMAC, ""},
		{kernel.KindIpvlan, parentMAC, hex.EncodeToString(append([]byte{0}, "underlay-"+drivertest.EpA...))},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			f := newJournal(t, true)
			n := dhcpNet(drivertest.NetA, tc.typ)
			ep := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
			drivertest.Put(t, f.db, []record.Network{n})
			f.clock.Advance(time.Minute)
			if err := f.ls.Journal(context.Background(), n, ep); err != nil {
				t.Fatal(err)
			}
			got := f.pending(t)
			want := record.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: "eth0", MAC: tc.mac, ClientID: tc.clientID, Lease: *ep.Lease, Since: t0.Add(time.Minute)}
			if len(got) != 1 || !equalPending(got[0], want) {
				t.Fatalf("journal = %+v, want [%+v]", got, want)
			}
			f.ls.Unjournal(n, ep)
			if got := f.pending(t); len(got) != 0 {
				t.Fatalf("journal = %+v after Unjournal", got)
			}
		})
	}
}

func equalPending(a, b record.PendingRelease) bool {
	return a.NetworkID == b.NetworkID && a.EndpointID == b.EndpointID && a.Parent == b.Parent && a.MAC == b.MAC &&
		a.ClientID == b.ClientID && a.Lease.Addr == b.Lease.Addr && a.Lease.Expiry.Equal(b.Lease.Expiry) && a.Since.Equal(b.Since)
}

func TestJournalNoRequest(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	ep := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
	ep.MAC = ""
	if err := f.ls.Journal(context.Background(), n, ep); err == nil || !strings.Contains(err.Error(), "no usable MAC") {
		t.Fatalf("Journal of an endpoint without a MAC = %v, want its refusal", err)
	}
	if got := f.pending(t); len(got) != 0 {
		t.Fatalf("journal = %+v, want nothing written", got)
	}
}

// TestJournalDeletion: the entry written with an endpoint's deletion is
// its held lease; none without one, or for a lost one.
func TestJournalDeletion(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	ep := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
	got := f.ls.JournalDeletion(context.Background(), n, ep)
	want := record.PendingRelease{NetworkID: n.ID, EndpointID: ep.ID, Parent: "eth0", MAC: epMAC, Lease: *ep.Lease, Since: t0, Deletion: true}
	if got == nil || !equalPending(*got, want) || !got.Deletion {
		t.Fatalf("JournalDeletion = %+v, want %+v (marked a deletion's)", got, want)
	}
	if p := f.pending(t); len(p) != 0 {
		t.Fatalf("JournalDeletion wrote %+v itself; the deletion's transaction does", p)
	}

	none := ep
	none.Lease = nil
	lost := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
	lost.Lease.Lost = t0
	noMAC := ep
	noMAC.MAC = ""
	for name, e := range map[string]record.Endpoint{"no lease": none, "lost": lost, "no MAC": noMAC} {
		if got := f.ls.JournalDeletion(context.Background(), n, e); got != nil {
			t.Errorf("%s: JournalDeletion = %+v, want nil", name, got)
		}
	}
}

func TestUnjournalOnlyItsLease(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	a := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
	b := leasedEndpoint(n, drivertest.EpB, "192.0.2.11/24")
	older := leasedEndpoint(n, drivertest.EpA, "192.0.2.12/24") // A's lease before a NAK
	for _, ep := range []record.Endpoint{a, b, older} {
		if err := f.ls.Journal(context.Background(), n, ep); err != nil {
			t.Fatal(err)
		}
	}
	f.ls.Unjournal(n, a)
	f.ls.Unjournal(n, record.Endpoint{NetworkID: n.ID, ID: drivertest.EpB}) // no lease: nothing
	if got, want := f.pendingAddrs(t), []string{"192.0.2.11/24", "192.0.2.12/24"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v, want %v", got, want)
	}
}

// TestReleaseJournaled: at start, a journaled lease no record holds is
// released and forgotten; one a record holds, or expired, is forgotten
// unreleased; one whose release fails, or without a client, is kept.
func TestReleaseJournaled(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	v := dhcpNet(drivertest.NetB, kernel.KindIpvlan)
	drivertest.Put(t, f.db, []record.Network{n, v})

	held := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")        // recorded: forget
	crashed := leasedEndpoint(n, drivertest.EpB, "192.0.2.11/24")     // no record: release
	replaced := leasedEndpoint(n, drivertest.EpC, "192.0.2.12/24")    // its record holds another: release
	failing := leasedEndpoint(n, drivertest.EpD, "192.0.2.13/24")     // release fails: keep
	expired := leasedEndpoint(v, drivertest.EpA, "192.0.2.14/24")     // expired: forget
	ipvlanCrash := leasedEndpoint(v, drivertest.EpB, "192.0.2.15/24") // no record: release with the client ID
	expired.Lease.Expiry = t0.Add(30 * time.Minute)
	for _, ep := range []record.Endpoint{held, crashed, replaced, failing, expired, ipvlanCrash} {
		net := n
		if ep.NetworkID == v.ID {
			net = v
		}
		if err := f.ls.Journal(context.Background(), net, ep); err != nil {
			t.Fatal(err)
		}
	}
	now := leasedEndpoint(n, drivertest.EpC, "192.0.2.20/24")
	drivertest.Put(t, f.db, nil, held, now)
	f.c.err["192.0.2.13/24"] = errors.New("sendto: network is down")
	f.clock.Advance(30 * time.Minute) // the expired one's expiry

	f.ls.releaseJournaled(context.Background())

	if got, want := f.c.addrs(), []string{"192.0.2.11/24", "192.0.2.12/24", "192.0.2.13/24", "192.0.2.15/24"}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
	if got, want := f.pendingAddrs(t), []string{"192.0.2.13/24"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v after the start, want only the one not released %v", got, want)
	}
	for _, r := range f.c.releases {
		switch r.l.Addr {
		case "192.0.2.11/24":
			if r.r.Parent != "eth0" || r.r.MAC.String() != epMAC || len(r.r.ClientID) != 0 {
				t.Fatalf("macvlan release asked %+v, want eth0 from %s without client ID", r.r, epMAC)
			}
		case "192.0.2.15/24":
			if r.r.Parent != "eth0" || r.r.MAC.String() != parentMAC || string(r.r.ClientID) != "\x00underlay-"+drivertest.EpB {
				t.Fatalf("ipvlan release asked %+v, want eth0 from %s with the endpoint's client ID", r.r, parentMAC)
			}
		}
	}

	// The next start tries the kept one again.
	delete(f.c.err, "192.0.2.13/24")
	f.ls.releaseJournaled(context.Background())
	if got := f.pendingAddrs(t); len(got) != 0 {
		t.Fatalf("journal %v after the release succeeded", got)
	}
}

// TestReleaseJournaledNoClient: without a lease client nothing is
// released; what needs a release is kept, the rest forgotten.
func TestReleaseJournaledNoClient(t *testing.T) {
	f := newJournal(t, false)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	drivertest.Put(t, f.db, []record.Network{n})
	held := leasedEndpoint(n, drivertest.EpA, "192.0.2.10/24")
	crashed := leasedEndpoint(n, drivertest.EpB, "192.0.2.11/24")
	for _, ep := range []record.Endpoint{held, crashed} {
		if err := f.ls.Journal(context.Background(), n, ep); err != nil {
			t.Fatal(err)
		}
	}
	drivertest.Put(t, f.db, nil, held)
	f.ls.releaseJournaled(context.Background())
	if got, want := f.pendingAddrs(t), []string{"192.0.2.11/24"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v, want %v", got, want)
	}
}

func TestReleaseJournaledEmpty(t *testing.T) {
	f := newJournal(t, true)
	f.ls.releaseJournaled(context.Background())
	if len(f.c.addrs()) != 0 {
		t.Fatalf("released %v from an empty journal", f.c.addrs())
	}
}

// TestReleaseJournaledSkipsDHCPv6: the DHCP leaser neither releases nor
// forgets the journal's DHCPv6 entries (the DHCPv6 family gives them back).
func TestReleaseJournaledSkipsDHCPv6(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	drivertest.Put(t, f.db, []record.Network{n})
	v6 := record.PendingRelease{NetworkID: n.ID, EndpointID: drivertest.EpA, Parent: "eth0", MAC: epMAC,
		Lease6: &record.Lease6{Addr: "2001:db8::10", Acquired: t0, Valid: time.Minute}, Since: t0}
	if err := f.db.Update(func(tx *store.Tx) error { return tx.PutPendingRelease(v6) }); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour) // past its valid lifetime too: not DHCP's to forget
	f.ls.releaseJournaled(context.Background())
	if got := f.c.addrs(); len(got) != 0 {
		t.Fatalf("the DHCP leaser released %v", got)
	}
	if got := f.pending(t); len(got) != 1 || got[0].Lease6 == nil || got[0].Addr() != "2001:db8::10" {
		t.Fatalf("journal %+v, want the DHCPv6 entry kept", got)
	}
}

// TestReleaseJournaledFamily: ReleaseJournaled over a family's own
// filter, holder test, expiry and release, keyed by the entry's address.
func TestReleaseJournaledFamily(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	drivertest.Put(t, f.db, []record.Network{n})
	entry := func(ep, addr string) record.PendingRelease {
		return record.PendingRelease{NetworkID: n.ID, EndpointID: ep, Parent: "eth0", MAC: epMAC,
			Lease6: &record.Lease6{Addr: addr, Acquired: t0, Valid: record.Infinite6}, Since: t0}
	}
	ipv4 := record.PendingRelease{NetworkID: n.ID, EndpointID: drivertest.EpD, Parent: "eth0", MAC: epMAC, Lease: lease(), Since: t0}
	entries := []record.PendingRelease{entry(drivertest.EpA, "2001:db8::a"), entry(drivertest.EpB, "2001:db8::b"), entry(drivertest.EpC, "2001:db8::c"), ipv4}
	if err := f.db.Update(func(tx *store.Tx) error {
		for _, p := range entries {
			if err := tx.PutPendingRelease(p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A's record holds its lease; B's release fails; C's goes.
	holder := record.Endpoint{NetworkID: n.ID, ID: drivertest.EpA, Link: config.EndpointLinkName(drivertest.EpA), Lease6: &record.Lease6{Addr: "2001:db8::a"}}
	drivertest.Put(t, f.db, nil, holder)
	var releasedAddrs []string
	ReleaseJournaled(context.Background(), f.db, slog.New(slog.DiscardHandler), t0.Add(100*365*24*time.Hour), Journaled{
		Family: "DHCPv6",
		Mine:   func(p record.PendingRelease) bool { return p.Lease6 != nil },
		Held: func(ep record.Endpoint, p record.PendingRelease) bool {
			return ep.Lease6 != nil && ep.Lease6.Addr == p.Lease6.Addr
		},
		Expiry: func(record.PendingRelease) time.Time { return time.Time{} }, // never: kept however late
		Release: func(_ context.Context, p record.PendingRelease) error {
			releasedAddrs = append(releasedAddrs, p.Addr())
			if p.EndpointID == drivertest.EpB {
				return errors.New("sendto: network is down")
			}
			return nil
		},
	})
	slices.Sort(releasedAddrs)
	if want := []string{"2001:db8::b", "2001:db8::c"}; !slices.Equal(releasedAddrs, want) {
		t.Fatalf("released %v, want %v", releasedAddrs, want)
	}
	if got, want := f.pendingAddrs(t), []string{"192.0.2.10/24", "2001:db8::b"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v, want %v (the other family's and the failed one)", got, want)
	}
}

// logRecords is a slog handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// lines are the records as "LEVEL message address=ADDR".
func (l *logRecords) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		line := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "address" {
				line += " address=" + a.Value.String()
			}
			return true
		})
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// TestReleaseJournaledNamesTheCase: the start's lines name how a journaled
// lease was left: a deletion's entry (PendingRelease.Deletion) as its
// endpoint's deletion whose release did not go through; an exchange's
// entry, and one written before the field was (no "deletion" in its
// JSON), as a crash between the exchange and the record, as before.
func TestReleaseJournaledNamesTheCase(t *testing.T) {
	f := newJournal(t, true)
	n := dhcpNet(drivertest.NetA, kernel.KindMacvlan)
	drivertest.Put(t, f.db, []record.Network{n})
	entry := func(ep, addr string, deletion bool) record.PendingRelease {
		return record.PendingRelease{NetworkID: n.ID, EndpointID: ep, Parent: "eth0", MAC: epMAC,
			Lease6: &record.Lease6{Addr: addr, Acquired: t0, Valid: record.Infinite6}, Since: t0, Deletion: deletion}
	}
	deleted, failing := entry(drivertest.EpA, "2001:db8::a", true), entry(drivertest.EpB, "2001:db8::b", true)
	crashed := entry(drivertest.EpC, "2001:db8::c", false)
	// An entry as a daemon before PendingRelease.Deletion wrote it.
	var old record.PendingRelease
	if err := json.Unmarshal([]byte(`{"network":"`+n.ID+`","endpoint":"`+drivertest.EpD+`","parent":"eth0","mac":"`+epMAC+
		`","lease":{"addr":"","acquired":"0001-01-01T00:00:00Z","t1":"0001-01-01T00:00:00Z","t2":"0001-01-01T00:00:00Z","expiry":"0001-01-01T00:00:00Z"},`+
		`"lease6":{"addr":"2001:db8::d","duid":"","iaid":"","server":"","acquired":"2026-01-01T00:00:00Z","t1":0,"t2":0,"preferred":0,"valid":9223372036854775807},"since":"2026-01-01T00:00:00Z"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Deletion {
		t.Fatalf("an entry without the field decoded as a deletion's: %+v", old)
	}
	if err := f.db.Update(func(tx *store.Tx) error {
		for _, p := range []record.PendingRelease{deleted, failing, crashed, old} {
			if err := tx.PutPendingRelease(p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := f.pending(t); len(got) != 4 || slices.ContainsFunc(got, func(p record.PendingRelease) bool {
		return p.Deletion != (p.EndpointID == drivertest.EpA || p.EndpointID == drivertest.EpB)
	}) {
		t.Fatalf("journal read back %+v: want the deletion mark on A's and B's entries only", got)
	}
	logs := &logRecords{}
	ReleaseJournaled(context.Background(), f.db, slog.New(logs), t0, Journaled{
		Family: "DHCPv6",
		Mine:   func(p record.PendingRelease) bool { return p.Lease6 != nil },
		Held:   func(record.Endpoint, record.PendingRelease) bool { return false },
		Expiry: func(record.PendingRelease) time.Time { return time.Time{} },
		Release: func(_ context.Context, p record.PendingRelease) error {
			if p.EndpointID == drivertest.EpB {
				return errors.New("sendto: network is down")
			}
			return nil
		},
	})
	const deletion = "journaled by its endpoint's deletion, whose own release did not go through (the daemon stopped before it, or the server did not answer it)"
	want := []string{
		"INFO released a DHCPv6 lease a crash left between its exchange and its record address=2001:db8::c",
		"INFO released a DHCPv6 lease a crash left between its exchange and its record address=2001:db8::d",
		"INFO released a DHCPv6 lease " + deletion + " address=2001:db8::a",
		"WARN could not release a DHCPv6 lease " + deletion + ": retrying at the next start until it expires address=2001:db8::b",
	}
	if got := logs.lines(); !slices.Equal(got, want) {
		t.Fatalf("start's lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPendingReleaseDeletionJSON: the mark is left out of an exchange's
// entry (the state file's bytes are those of before), written for a
// deletion's.
func TestPendingReleaseDeletionJSON(t *testing.T) {
	p := record.PendingRelease{NetworkID: "n", EndpointID: "e", Lease6: &record.Lease6{Addr: "2001:db8::a"}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "deletion") {
		t.Errorf("an exchange's entry carries the mark: %s", b)
	}
	p.Deletion = true
	if b, err = json.Marshal(p); err != nil || !strings.Contains(string(b), `"deletion":true`) {
		t.Errorf("a deletion's entry: %s, %v; want \"deletion\":true", b, err)
	}
}
