package ipam

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/underlay-net/underlay/store"
)

// Sticky addresses by name in the store (choose.go decides): a record per
// endpoint name and subnet (address space, the parent of a --ipam-opt
// parent= pool, and prefix, so a re-created network's new pool of the same
// subnet finds them, and pools of one subnet on two parents do not share
// them), written when the
// name is given an address, stamped when that address is released, and
// forgotten nameTTL after its last use or when the subnet has more than
// namesPerSubnet names.

// nameScope is the scope of a pool's names: its address space, and its
// parent when it has one ("underlay-local@eth0"; the store keys names by
// scope|subnet, so no "|" here).
func nameScope(rec store.IPAMPool) string {
	if rec.Parent == "" {
		return rec.Space
	}
	return rec.Space + "@" + rec.Parent
}

// SweepNames forgets, in every subnet, the names pruneNames would (run at
// start: a subnet no pool asks for again would keep its names forever).
func (m *IPAM) SweepNames(context.Context) error {
	now := m.now()
	return m.store.Batch(func(tx *store.Tx) error {
		names, err := tx.AllIPAMNames()
		if err != nil {
			return err
		}
		seen := map[[2]string]bool{}
		for _, n := range names {
			k := [2]string{n.Space, n.Subnet}
			if seen[k] {
				continue
			}
			seen[k] = true
			space, parent, _ := strings.Cut(n.Space, "@")
			if err := m.pruneNames(tx, store.IPAMPool{Space: space, Parent: parent, Prefix: n.Subnet}, now, true); err != nil {
				return err
			}
		}
		return nil
	})
}

// pickInput reads what chooseAddress decides over for a request on rec;
// readErr returns the first error its Remembered met (a corrupt record),
// to check once chooseAddress is done.
func (m *IPAM) pickInput(tx *store.Tx, rec store.IPAMPool, pool netip.Prefix, r addrRequest, used func(netip.Addr) bool, now time.Time) (in pickInput, readErr func() error, err error) {
	in = pickInput{Pool: pool, Taken: used}
	if r.skip != nil {
		in.Taken = func(a netip.Addr) bool { return used(a) || r.skip(a) }
	}
	if rec.Range != "" {
		in.Range, _ = netip.ParsePrefix(rec.Range)
	}
	if r.name != "" {
		n, ok, err := tx.IPAMName(nameScope(rec), rec.Prefix, r.name)
		if err != nil {
			return pickInput{}, nil, err
		}
		if ok && nameLive(n, false, now, nameTTL) {
			in.Sticky, _ = netip.ParseAddr(n.Address)
		}
	}
	var first error
	in.Remembered = func(a netip.Addr) (time.Time, bool) {
		n, ok, err := tx.IPAMNameOf(nameScope(rec), rec.Prefix, a.String())
		if err != nil {
			first = cmp.Or(first, err)
			return time.Time{}, false
		}
		if !ok || !nameLive(n, false, now, nameTTL) {
			return time.Time{}, false
		}
		return n.LastUsed(), true
	}
	return in, func() error { return first }, nil
}

// recordName remembers that name holds a in rec's subnet (nothing when
// the request sent no name). An address remembered for another name that
// another request gets is forgotten for that name.
func (m *IPAM) recordName(tx *store.Tx, rec store.IPAMPool, a netip.Addr, name string, now time.Time) error {
	other, had, err := tx.IPAMNameOf(nameScope(rec), rec.Prefix, a.String())
	if err != nil {
		return err
	}
	if had && other.Name != name {
		if err := tx.DeleteIPAMName(nameScope(rec), rec.Prefix, other.Name); err != nil {
			return err
		}
		if nameLive(other, false, now, nameTTL) {
			m.log.Info("address remembered for an endpoint name given to another endpoint: the name is forgotten", "pool", rec.ID, "address", a,
				"forgotten_name", other.Name, "to", name)
		}
	}
	if name == "" {
		return nil
	}
	prev, existed, err := tx.IPAMName(nameScope(rec), rec.Prefix, name)
	if err != nil {
		return err
	}
	if err := tx.PutIPAMName(store.IPAMName{Space: nameScope(rec), Subnet: rec.Prefix, Name: name, Address: a.String(), Given: now}); err != nil {
		return err
	}
	if existed && prev.Address != a.String() {
		m.log.Info("endpoint name remembered with another address", "pool", rec.ID, "name", name, "address", a, "was", prev.Address)
	}
	if existed {
		return nil
	}
	return m.pruneNames(tx, rec, now, false)
}

// pruneNames forgets the names of rec's subnet pruneNames picks (always,
// or only when some may go).
func (m *IPAM) pruneNames(tx *store.Tx, rec store.IPAMPool, now time.Time, always bool) error {
	names, err := tx.IPAMNames(nameScope(rec), rec.Prefix)
	if err != nil || !always && len(names) <= namesPerSubnet/2 && !anyExpired(names, now) {
		return err
	}
	held, err := subnetHeld(tx, rec)
	if err != nil {
		return err
	}
	for _, name := range pruneNames(names, held, now, nameTTL, namesPerSubnet) {
		if err := tx.DeleteIPAMName(nameScope(rec), rec.Prefix, name); err != nil {
			return err
		}
		m.log.Info("endpoint name forgotten: unused too long, or too many names in the subnet", "subnet", rec.Prefix, "name", name,
			"ttl", nameTTL, "max", namesPerSubnet)
	}
	return nil
}

// anyExpired reports whether a name released nameTTL ago is there (a
// name whose address is still held by it, by its record, is not: those
// are never forgotten, and would make every new name prune).
func anyExpired(names []store.IPAMName, now time.Time) bool {
	for _, n := range names {
		if n.Released.After(n.Given) && !nameLive(n, false, now, nameTTL) {
			return true
		}
	}
	return false
}

// subnetHeld reports whether an address is allocated in a pool of rec's
// address space and subnet.
func subnetHeld(tx *store.Tx, rec store.IPAMPool) (func(string) bool, error) {
	pools, err := tx.IPAMPools()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range pools {
		if nameScope(p) == nameScope(rec) && p.Prefix == rec.Prefix {
			ids = append(ids, p.ID)
		}
	}
	return func(a string) bool {
		for _, id := range ids {
			if tx.IPAMAddressUsed(id, a) {
				return true
			}
		}
		return false
	}, nil
}

// nameReleased stamps the release of a on the name it is remembered for.
func (m *IPAM) nameReleased(tx *store.Tx, poolID string, a netip.Addr) error {
	rec, ok, err := tx.IPAMPool(poolID)
	if err != nil || !ok || !tx.IPAMAddressUsed(poolID, a.String()) {
		return err
	}
	n, ok, err := tx.IPAMNameOf(nameScope(rec), rec.Prefix, a.String())
	if err != nil || !ok {
		return err
	}
	n.Released = m.now()
	return tx.PutIPAMName(n)
}

// NameState is a remembered name, for underlay ls (the control API's
// JSON: store.IPAMName keeps its key out of its JSON).
type NameState struct {
	Space    string    `json:"space"`
	Subnet   string    `json:"subnet"`
	Name     string    `json:"name"`
	Address  string    `json:"address"`
	LastUsed time.Time `json:"last_used"`
	// Held says the address is allocated now; else it is kept for the
	// name until Until.
	Held  bool      `json:"held"`
	Until time.Time `json:"until,omitzero"`
}

// Names lists the names remembered, by space, subnet and name (those
// past their time, not yet pruned, are left out).
func (m *IPAM) Names(context.Context) ([]NameState, error) {
	var out []NameState
	now := m.now()
	err := m.store.View(func(tx *store.Tx) error {
		names, err := tx.AllIPAMNames()
		if err != nil {
			return err
		}
		pools, err := tx.IPAMPools()
		if err != nil {
			return err
		}
		for _, n := range names {
			held := false
			for _, p := range pools {
				held = held || nameScope(p) == n.Space && p.Prefix == n.Subnet && tx.IPAMAddressUsed(p.ID, n.Address)
			}
			if !nameLive(n, held, now, nameTTL) {
				continue
			}
			s := NameState{Space: n.Space, Subnet: n.Subnet, Name: n.Name, Address: n.Address, LastUsed: n.LastUsed(), Held: held}
			if !held {
				s.Until = n.LastUsed().Add(nameTTL)
			}
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read IPAM names: %w", err)
	}
	return out, nil
}
