package joins

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/drivertest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// plain has no host address: its joins are kept in memory; shimmed has
// one: its joins are committed in the endpoint's record.
var (
	plain   = drivertest.Macvlan(drivertest.NetA, "eth0", "bridge", "192.0.2.0/24")
	shimmed = func() record.Network {
		n := drivertest.Macvlan(drivertest.NetB, "eth1", "bridge", "198.51.100.0/24")
		n.HostAddress = "198.51.100.254"
		return n
	}()
)

func endpoint(n record.Network, id, ipv4 string) record.Endpoint {
	return record.Endpoint{NetworkID: n.ID, ID: id, Link: config.EndpointLinkName(id), MAC: "02:00:00:00:00:01", IPv4: ipv4}
}

// recorded reads an endpoint's record as committed.
func recorded(t *testing.T, db *store.DB, n record.Network, id string) record.Endpoint {
	t.Helper()
	var ep record.Endpoint
	if err := db.View(func(tx *store.Tx) error {
		var ok bool
		var err error
		if ep, ok, err = tx.Endpoint(n.ID, id); err == nil && !ok {
			t.Fatalf("no record of endpoint %s", id)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ep
}

// commit runs a commit Join or Leave returned, in its own batch.
func commit(t *testing.T, db *store.DB, c func(*store.Tx) error) {
	t.Helper()
	if err := db.Batch(c); err != nil {
		t.Fatal(err)
	}
}

// endpoints reads a network's endpoints with their joins, by ID.
func endpoints(t *testing.T, db *store.DB, j *Table, n record.Network) map[string]record.Endpoint {
	t.Helper()
	out := map[string]record.Endpoint{}
	if err := db.View(func(tx *store.Tx) error {
		eps, err := j.Endpoints(tx, n.ID)
		for _, ep := range eps {
			out[ep.ID] = ep
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDurable(t *testing.T) {
	if Durable(plain) {
		t.Error("a network without a host address has durable joins")
	}
	if !Durable(shimmed) {
		t.Error("a network with a host address has joins in memory only")
	}
}

// TestJoinInMemory: a network without a host address commits nothing for
// a join; every reader still sees it, until Leave or Drop.
func TestJoinInMemory(t *testing.T) {
	db := drivertest.Store(t)
	ep := endpoint(plain, drivertest.EpA, "192.0.2.10/24")
	other := endpoint(plain, drivertest.EpB, "192.0.2.11/24")
	drivertest.Put(t, db, []record.Network{plain}, ep, other)
	j := NewTable()

	if c := j.Join(plain, ep, "sandbox-1", "boot-1"); c != nil {
		t.Fatal("Join of a network without a host address returned a commit")
	}
	if got := recorded(t, db, plain, ep.ID); got.Sandbox != "" || got.Boot != "" {
		t.Fatalf("the record holds the join %q/%q; it is kept in memory", got.Sandbox, got.Boot)
	}
	if got := j.Overlay(ep); got.Sandbox != "sandbox-1" || got.Boot != "boot-1" {
		t.Fatalf("Overlay = %q/%q, want sandbox-1/boot-1", got.Sandbox, got.Boot)
	}
	eps := endpoints(t, db, j, plain)
	if got := eps[ep.ID]; got.Sandbox != "sandbox-1" || got.Boot != "boot-1" {
		t.Fatalf("Endpoints gives the joined endpoint %q/%q, want sandbox-1/boot-1", got.Sandbox, got.Boot)
	}
	if got := eps[other.ID]; got.Sandbox != "" {
		t.Fatalf("Endpoints gives the endpoint not joined the sandbox %q", got.Sandbox)
	}

	if c := j.Leave(ep); c != nil {
		t.Fatal("Leave of a join kept in memory returned a commit")
	}
	if got := j.Overlay(ep); got.Sandbox != "" || got.Boot != "" {
		t.Fatalf("after Leave, Overlay = %q/%q", got.Sandbox, got.Boot)
	}

	j.Join(plain, ep, "sandbox-2", "boot-1")
	j.Drop(ep.ID)
	if got := endpoints(t, db, j, plain)[ep.ID]; got.Sandbox != "" {
		t.Fatalf("after Drop, Endpoints gives the sandbox %q", got.Sandbox)
	}
}

// TestJoinDurable: a network with a host address gets its join in the
// endpoint's record (through the caller's batch), and Leave clears it.
func TestJoinDurable(t *testing.T) {
	db := drivertest.Store(t)
	ep := endpoint(shimmed, drivertest.EpA, "198.51.100.10/24")
	drivertest.Put(t, db, []record.Network{shimmed}, ep)
	j := NewTable()

	c := j.Join(shimmed, ep, "sandbox-1", "boot-1")
	if c == nil {
		t.Fatal("Join of a network with a host address returned no commit")
	}
	if got := recorded(t, db, shimmed, ep.ID); got.Sandbox != "" {
		t.Fatalf("Join committed %q itself; the caller's batch does", got.Sandbox)
	}
	commit(t, db, c)
	rec := recorded(t, db, shimmed, ep.ID)
	if rec.Sandbox != "sandbox-1" || rec.Boot != "boot-1" {
		t.Fatalf("record = %q/%q after the commit, want sandbox-1/boot-1", rec.Sandbox, rec.Boot)
	}
	// Not in memory too: a new table (a restarted daemon) reads it.
	if got := endpoints(t, db, NewTable(), shimmed)[ep.ID]; got.Sandbox != "sandbox-1" {
		t.Fatalf("a new table reads the sandbox %q, want sandbox-1", got.Sandbox)
	}
	if got := j.Overlay(record.Endpoint{ID: ep.ID}); got.Sandbox != "" {
		t.Fatalf("the durable join is also in memory (%q)", got.Sandbox)
	}

	if c := j.Join(shimmed, rec, "sandbox-1", "boot-1"); c != nil {
		t.Fatal("Join the record already says returned a commit")
	}

	c = j.Leave(rec)
	if c == nil {
		t.Fatal("Leave of a join in the record returned no commit")
	}
	commit(t, db, c)
	if got := recorded(t, db, shimmed, ep.ID); got.Sandbox != "" || got.Boot != "" {
		t.Fatalf("after Leave's commit the record holds %q/%q", got.Sandbox, got.Boot)
	}
}

// TestJoinOlderRecord: a record an older version wrote with a join keeps
// its joins there, whatever the network; the record wins over memory.
func TestJoinOlderRecord(t *testing.T) {
	db := drivertest.Store(t)
	ep := endpoint(plain, drivertest.EpA, "192.0.2.10/24")
	ep.Sandbox, ep.Boot = "old-sandbox", "boot-0"
	drivertest.Put(t, db, []record.Network{plain}, ep)
	j := NewTable()

	c := j.Join(plain, ep, "sandbox-1", "boot-1")
	if c == nil {
		t.Fatal("Join of an endpoint whose record holds a join returned no commit")
	}
	commit(t, db, c)
	if got := recorded(t, db, plain, ep.ID); got.Sandbox != "sandbox-1" || got.Boot != "boot-1" {
		t.Fatalf("record = %q/%q, want sandbox-1/boot-1", got.Sandbox, got.Boot)
	}

	// The record's join is what readers see, not one in memory.
	rec := recorded(t, db, plain, ep.ID)
	j.set(ep.ID, "memory", "boot-9")
	if got := j.Overlay(rec); got.Sandbox != "sandbox-1" {
		t.Fatalf("Overlay = %q, want the record's sandbox-1", got.Sandbox)
	}

	c = j.Leave(rec)
	if c == nil {
		t.Fatal("Leave returned no commit for a record holding a join")
	}
	commit(t, db, c)
	if got := endpoints(t, db, j, plain)[ep.ID]; got.Sandbox != "" {
		t.Fatalf("after Leave, Endpoints gives %q (from the record or memory)", got.Sandbox)
	}
}

func TestJoinedV4(t *testing.T) {
	db := drivertest.Store(t)
	a := endpoint(shimmed, drivertest.EpA, "198.51.100.10/24")
	b := endpoint(shimmed, drivertest.EpB, "198.51.100.11/24")
	c := endpoint(shimmed, drivertest.EpC, "198.51.100.12/24")
	d := endpoint(shimmed, drivertest.EpD, "")
	d.IPv6 = "2001:db8::d/64"
	c.Sandbox, c.Boot = "sandbox-c", "boot-0" // joined before a reboot
	drivertest.Put(t, db, []record.Network{shimmed, plain}, a, b, c, d)
	j := NewTable()
	for _, ep := range []record.Endpoint{a, d} {
		commit(t, db, j.Join(shimmed, ep, "sandbox-"+ep.ID[:2], "boot-1"))
	}
	// b not joined; c joined in another boot; d has no IPv4 address.

	var got []netip.Addr
	if err := db.View(func(tx *store.Tx) (err error) {
		got, err = j.JoinedV4(tx, shimmed.ID, "boot-1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{netip.MustParseAddr("198.51.100.10")}; !slices.Equal(got, want) {
		t.Fatalf("JoinedV4 = %v, want %v", got, want)
	}

	// A join kept in memory counts too.
	pa := endpoint(plain, "fafafafafafa0000000000000000000000000000000000000000000000000001", "192.0.2.10/24")
	drivertest.Put(t, db, nil, pa)
	j.Join(plain, pa, "sandbox-p", "boot-1")
	if err := db.View(func(tx *store.Tx) (err error) {
		got, err = j.JoinedV4(tx, plain.ID, "boot-1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{netip.MustParseAddr("192.0.2.10")}; !slices.Equal(got, want) {
		t.Fatalf("JoinedV4 of a join in memory = %v, want %v", got, want)
	}
}
