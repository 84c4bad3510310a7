// Package joins is the one owner of endpoints' joins (Table): where a
// join is kept, in memory or in the endpoint's record (Durable), is its
// business alone; every read and write of a join goes through it. The
// interface names endpoints ask for, which their Join answers, are kept
// here too (IfNames, ifnames.go).
//
// Rule: the store only through the transaction it is handed (it commits
// nothing itself: Join and Leave return the commit for the caller's
// batch); no kernel, no locks (the caller holds the endpoint's).
package joins

import (
	"net/netip"
	"sync"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// A join lasts until its container stops or the host boots. For most
// networks nothing about it needs the state file: the link is made again
// by the next Join, the kernel ends it at a reboot, and Docker never joins
// an endpoint it has joined until it left. So Join and Leave commit
// nothing for them: the join (sandbox and boot) is kept in memory, where it
// serves the one check that reads it during the daemon's life (a second
// Join while the link is in a sandbox is refused), `underlay ls`, and the
// parent-move decision. Networks with a host address are the exception:
// the host's /32 route to every joined endpoint must come back after a
// daemon restart, so their joins are committed in the endpoint's record as
// before. Records written by older versions may carry a join too; Leave
// clears it.
//
// Once the endpoint's interface was read in its container (Plumbed, in
// the background after the Join: the container-side repair's record), the
// join is in the record too, for every network: Leave then commits its
// clearing. What a restart of the daemon forgets: the joins of networks
// without a host address whose interface was not read yet. Until the
// endpoint leaves, a second Join of such an endpoint is then not refused;
// `underlay ls` shows it as not joined.

// Table is the one owner of endpoints' joins: where a join is kept
// (memory or the endpoint's record, Durable) is its business alone.
// Every read of a join goes through it (Endpoints, Overlay), and every
// write (Join, Leave, Drop); no reader fills in joins from memory itself.
// The memory part holds the joins not committed, by endpoint ID.
type Table struct {
	mu sync.Mutex
	m  map[string]join
}

type join struct{ sandbox, boot string }

// NewTable returns a table with no join in memory.
func NewTable() *Table { return &Table{m: map[string]join{}} }

func (j *Table) set(epID, sandbox, boot string) {
	j.mu.Lock()
	j.m[epID] = join{sandbox, boot}
	j.mu.Unlock()
}

// Drop forgets an endpoint's join kept in memory.
func (j *Table) Drop(epID string) {
	j.mu.Lock()
	delete(j.m, epID)
	j.mu.Unlock()
}

// Overlay returns ep with its join filled in from memory when its record
// has none.
func (j *Table) Overlay(ep record.Endpoint) record.Endpoint {
	if ep.Sandbox != "" {
		return ep
	}
	j.mu.Lock()
	in, ok := j.m[ep.ID]
	j.mu.Unlock()
	if ok {
		ep.Sandbox, ep.Boot = in.sandbox, in.boot
	}
	return ep
}

// Endpoints reads a network's endpoints with their joins, wherever each
// is kept.
func (j *Table) Endpoints(tx *store.Tx, networkID string) ([]record.Endpoint, error) {
	eps, err := tx.Endpoints(networkID)
	for i := range eps {
		eps[i] = j.Overlay(eps[i])
	}
	return eps, err
}

// JoinedV4 lists the IPv4 addresses of a network's endpoints joined in
// boot: the /32 routes its host link carries.
func (j *Table) JoinedV4(tx *store.Tx, networkID, boot string) ([]netip.Addr, error) {
	eps, err := j.Endpoints(tx, networkID)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ep := range eps {
		if a, ok := plan.EndpointV4(ep); ok && ep.Sandbox != "" && ep.Boot == boot {
			out = append(out, a)
		}
	}
	return out, nil
}

// Join keeps ep joined to sandbox in boot: in memory for a network whose
// joins are not durable (nothing to commit: nil), else the commit of its
// record (nil when the record already says so). A record written by an
// older version with a join keeps it there.
func (j *Table) Join(n record.Network, ep record.Endpoint, sandbox, boot string) func(*store.Tx) error {
	if !Durable(n) && ep.Sandbox == "" {
		j.set(ep.ID, sandbox, boot)
		return nil
	}
	if ep.Sandbox == sandbox && ep.Boot == boot {
		return nil
	}
	ep.Sandbox, ep.Boot, ep.Plumb = sandbox, boot, nil // the interface is read there again
	return func(tx *store.Tx) error { return tx.PutEndpoint(ep) }
}

// Leave forgets ep's join: from memory, and the commit clearing its record
// (its sandbox and its interface there) when the record holds it (nil
// otherwise: no write).
func (j *Table) Leave(ep record.Endpoint) func(*store.Tx) error {
	j.Drop(ep.ID)
	if ep.Sandbox == "" && ep.Plumb == nil {
		return nil
	}
	ep.Sandbox, ep.Boot, ep.Plumb = "", "", nil
	return func(tx *store.Tx) error { return tx.PutEndpoint(ep) }
}

// Plumbed keeps what ep's interface is in its container (read there after
// the Join) in its record, with the join, which it makes durable: the
// commit, or nil when ep is no longer joined to sandbox in boot (it left
// meanwhile, or joined again elsewhere).
func (j *Table) Plumbed(ep record.Endpoint, sandbox, boot string, p record.Plumb) func(*store.Tx) error {
	cur := j.Overlay(ep)
	if cur.Sandbox != sandbox || cur.Boot != boot {
		return nil
	}
	ep.Sandbox, ep.Boot, ep.Plumb = sandbox, boot, &p
	return func(tx *store.Tx) error { return tx.PutEndpoint(ep) }
}

// Durable reports whether a network's joins are committed (networks with
// a host address: the host's routes to joined endpoints come back after a
// restart).
func Durable(n record.Network) bool { return n.HostAddress != "" }
