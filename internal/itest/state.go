package itest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
	"github.com/vishvananda/netlink"
)

// State is what a stopped daemon left in its state file.
type State struct {
	Networks  map[string]record.Network
	Endpoints map[string]record.Endpoint // by link name
	Parents   map[string]record.ParentLink
	Pending   []string
}

// NetworkIDs returns the stored network IDs, sorted.
func (s State) NetworkIDs() []string {
	var ids []string
	for id := range s.Networks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ReadState reads the daemon's state file; the daemon must not be running.
func (d *Daemon) ReadState() State {
	d.t.Helper()
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		d.t.Fatalf("open state file: %v", err)
	}
	defer db.Close()
	s := State{Networks: map[string]record.Network{}, Endpoints: map[string]record.Endpoint{}, Parents: map[string]record.ParentLink{}}
	err = db.View(func(tx *store.Tx) error {
		if err := tx.ForEachNetwork(func(n record.Network) error {
			s.Networks[n.ID] = n
			if n.Pending != nil {
				s.Pending = append(s.Pending, n.ID)
			}
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				s.Endpoints[ep.Link] = ep
			}
			return err
		}); err != nil {
			return err
		}
		ps, err := tx.ParentLinks()
		for _, p := range ps {
			s.Parents[p.Name] = p
		}
		return err
	})
	if err != nil {
		d.t.Fatalf("read state file: %v", err)
	}
	return s
}

// CheckConsistent stops the daemon (SIGTERM), checks that its state file
// and the namespace's links agree, starts it again and returns the state.
// Agreement: no pending reservation; every endpoint-form link (ule...) in
// the namespace belongs to an endpoint record; every parent link underlay
// owns is used by a network and exists; every network's parent exists; no
// dummy of underlay's form is left unowned.
func (d *Daemon) CheckConsistent() State {
	d.t.Helper()
	if err := d.Stop(); err != nil {
		d.t.Fatal(err)
	}
	s := d.ReadState()
	if errs := s.Disagreements(d.ns); len(errs) > 0 {
		d.t.Fatalf("state and kernel disagree:\n  %s", strings.Join(errs, "\n  "))
	}
	d.Start()
	return s
}

// Disagreements lists where the state and the namespace's links differ.
func (s State) Disagreements(ns *Netns) []string {
	var errs []string
	if len(s.Pending) > 0 {
		errs = append(errs, fmt.Sprintf("pending reservations left: %v", s.Pending))
	}
	links, err := ns.NL.LinkList()
	if err != nil {
		return append(errs, "list links: "+err.Error())
	}
	have := map[string]netlink.Link{}
	for _, l := range links {
		name := l.Attrs().Name
		have[name] = l
		switch {
		case strings.HasPrefix(name, "ule") && len(name) == 15 && (l.Type() == "macvlan" || l.Type() == "ipvlan"):
			if _, ok := s.Endpoints[name]; !ok {
				errs = append(errs, "endpoint link "+name+" has no endpoint record (leaked)")
			}
		case strings.HasPrefix(name, "uli") && len(name) == 15 && l.Type() == "dummy":
			if _, ok := s.Parents[name]; !ok {
				errs = append(errs, "dummy link "+name+" is not owned (leaked)")
			}
		}
	}
	used := map[string]bool{}
	for _, n := range s.Networks {
		used[n.Parent] = true
		if _, ok := have[n.Parent]; !ok {
			errs = append(errs, fmt.Sprintf("network %s has no parent link %s", n.ID[:12], n.Parent))
		}
	}
	for name := range s.Parents {
		if !used[name] {
			errs = append(errs, "owned parent link "+name+" is used by no network")
		}
		if _, ok := have[name]; !ok && used[name] {
			errs = append(errs, "owned parent link "+name+" is missing from the kernel")
		}
	}
	for link, ep := range s.Endpoints {
		if _, ok := s.Networks[ep.NetworkID]; !ok {
			errs = append(errs, "endpoint "+link+" belongs to no network")
		}
	}
	sort.Strings(errs)
	return errs
}

// WantEmpty fails unless the state file holds nothing.
func (s State) WantEmpty(t testing.TB) {
	t.Helper()
	if len(s.Networks)+len(s.Endpoints)+len(s.Parents) > 0 {
		t.Fatalf("state not empty: networks %v, endpoints %d, parent links %d", s.NetworkIDs(), len(s.Endpoints), len(s.Parents))
	}
}
