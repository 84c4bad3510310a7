package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"golang.org/x/sys/unix"
)

// Parent links: checking the one a network asks for against the kernel,
// creating the VLAN and dummy links underlay owns, and deleting them with
// the last network on them.

const (
	kindVLAN  = "vlan"
	kindDummy = "dummy"
)

// splitVLAN parses "base.vid".
func splitVLAN(name string) (base string, vid int, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	vid, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return "", 0, false
	}
	return name[:i], vid, true
}

// planParent checks the network's parent against the kernel. It returns
// the parent link underlay must create for it, or nil when the link exists
// and is usable as it is.
func (d *Driver) planParent(ctx context.Context, n store.Network) (*store.ParentLink, error) {
	l, err := d.links.Get(ctx, n.Parent)
	if err == nil {
		if err := checkParentLink(l, n); err != nil {
			return nil, err
		}
		return nil, checkMTU(n, l.Name, l.MTU)
	}
	if !errors.Is(err, netlinkutil.ErrNotFound) {
		return nil, err
	}
	if n.Parent == dummyName(n.ID) && n.Options[OptParent] == "" {
		return &store.ParentLink{Name: n.Parent, Kind: kindDummy, MTU: n.MTU}, nil
	}
	base, vid, ok := splitVLAN(n.Parent)
	if !ok {
		return nil, invalidf("parent interface %s does not exist on this host: pass an existing interface with -o parent=IFACE, or IFACE.VLAN (for example eth0.10) to have underlay create a VLAN sub-interface", n.Parent)
	}
	if vid < 1 || vid > 4094 {
		return nil, invalidf("parent %s asks for VLAN %d, outside 1-4094: use a VLAN ID from 1 to 4094", n.Parent, vid)
	}
	bl, err := d.links.Get(ctx, base)
	if errors.Is(err, netlinkutil.ErrNotFound) {
		return nil, invalidf("parent %s would be VLAN %d on %s, but %s does not exist on this host: use an existing interface as the base", n.Parent, vid, base, base)
	}
	if err != nil {
		return nil, err
	}
	if base == "lo" {
		return nil, invalidf("parent %s would be a VLAN on the loopback interface: use a physical interface as the base", n.Parent)
	}
	if err := checkParentLink(bl, n); err != nil {
		return nil, err
	}
	if err := checkMTU(n, base, bl.MTU); err != nil {
		return nil, err
	}
	return &store.ParentLink{Name: n.Parent, Kind: kindVLAN, Base: base, VLAN: vid}, nil
}

// checkParentLink refuses links that must never be a parent.
func checkParentLink(l netlinkutil.Link, n store.Network) error {
	switch {
	case l.Name == "lo":
		return invalidf("parent lo is the loopback interface, which cannot carry macvlan or ipvlan links: use a physical or VLAN interface")
	case isEndpointLinkName(l.Name) && (l.Kind == typeMacvlan || l.Kind == typeIpvlan):
		return invalidf("parent %s is an endpoint link underlay created for a container: use the host interface it hangs off", l.Name)
	case isDummyName(l.Name) && l.Name != dummyName(n.ID):
		return invalidf("parent %s is the dummy link of another internal network: omit -o parent to get an internal network of its own", l.Name)
	case l.Kind == "bridge" && isDockerBridge(l.Name):
		return invalidf("parent %s is a bridge Docker manages: macvlan and ipvlan networks need a host uplink interface (for example eth0) as parent", l.Name)
	}
	return nil
}

func isDockerBridge(name string) bool {
	if name == "docker0" || name == "docker_gwbridge" {
		return true
	}
	rest, ok := strings.CutPrefix(name, "br-")
	return ok && len(rest) == idChars && strings.Trim(rest, "0123456789abcdef") == ""
}

func checkMTU(n store.Network, parent string, parentMTU int) error {
	if n.MTU > parentMTU && parentMTU > 0 {
		return invalidf("mtu %d is larger than the MTU %d of parent %s: use -o mtu=%d or less, or raise the parent's MTU", n.MTU, parentMTU, parent, parentMTU)
	}
	return nil
}

// createParentLink creates a parent link underlay owns; one that already
// exists (made by a concurrent network or a previous attempt) is fine.
func (d *Driver) createParentLink(ctx context.Context, p store.ParentLink) error {
	var err error
	switch p.Kind {
	case kindVLAN:
		err = d.links.AddVLAN(ctx, p.Name, p.Base, p.VLAN, p.MTU)
	case kindDummy:
		err = d.links.AddDummy(ctx, p.Name, p.MTU)
	default:
		return fmt.Errorf("parent link %s has unknown kind %q", p.Name, p.Kind)
	}
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// recreateParentLink creates an owned parent link that is missing, first
// re-creating its base when that is an owned VLAN that vanished too (a VLAN
// on a VLAN after a reboot).
func (d *Driver) recreateParentLink(ctx context.Context, p store.ParentLink) error {
	if p.Kind == kindVLAN {
		if _, err := d.links.Get(ctx, p.Base); errors.Is(err, netlinkutil.ErrNotFound) {
			var base store.ParentLink
			var owned bool
			if err := d.store.View(func(tx *store.Tx) (err error) {
				base, owned, err = tx.ParentLink(p.Base)
				return err
			}); err != nil {
				return err
			}
			if owned {
				if err := d.recreateParentLink(ctx, base); err != nil {
					return err
				}
			}
		}
	}
	d.log.Info("re-creating missing parent link underlay created", "parent", p.Name, "kind", p.Kind)
	return d.createParentLink(ctx, p)
}

// ensureParent makes sure a stored network's parent exists, re-creating a
// VLAN or dummy link underlay owns (or, for a VLAN parent, creating and
// then owning it) when it is missing. The caller holds the parent lock.
func (d *Driver) ensureParent(ctx context.Context, n store.Network) error {
	_, err := d.links.Get(ctx, n.Parent)
	if err == nil || !errors.Is(err, netlinkutil.ErrNotFound) {
		return err
	}
	var owned store.ParentLink
	var ok bool
	if err := d.store.View(func(tx *store.Tx) (err error) {
		owned, ok, err = tx.ParentLink(n.Parent)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		plan, err := d.planParent(ctx, n)
		if err != nil {
			return err
		}
		if plan == nil {
			return nil
		}
		owned = *plan
		if err := d.store.Update(func(tx *store.Tx) error { return tx.PutParentLink(owned) }); err != nil {
			return err
		}
	}
	if err := d.recreateParentLink(ctx, owned); err != nil {
		return fmt.Errorf("re-create parent %s of network %s: %w", owned.Name, short(n.ID), err)
	}
	return nil
}

// parentNeeded reports whether a parent link must stay: a network names it,
// or a parent link underlay created on it (a VLAN on a VLAN) must stay.
func parentNeeded(tx *store.Tx, name string) bool {
	if tx.ParentInUse(name) {
		return true
	}
	for _, upper := range tx.ParentLinksOn(name) {
		if parentNeeded(tx, upper) {
			return true
		}
	}
	return false
}

// releaseParent deletes a parent link underlay created once nothing needs
// it: no network names it, no needed link underlay made stands on it, and
// no link someone else made stands on it. Links underlay did not create are
// never deleted. When a VLAN goes, its base is reconsidered: it may be a
// VLAN underlay created that only this one needed. The caller holds the
// parent's lock; the base's is only tried.
func (d *Driver) releaseParent(ctx context.Context, name string) error {
	var needed, owned bool
	var rec store.ParentLink
	var uppers []string
	if err := d.store.View(func(tx *store.Tx) (err error) {
		needed = parentNeeded(tx, name)
		uppers = tx.ParentLinksOn(name)
		rec, owned, err = tx.ParentLink(name)
		return err
	}); err != nil || needed || !owned {
		return err
	}
	for _, upper := range uppers { // unneeded links underlay made on it go first
		unlock, ok := d.locks.tryExclusive(parentLock(upper))
		if !ok {
			return nil // a request is working on it; reconsidered at the next start
		}
		err := d.releaseParent(ctx, upper)
		unlock()
		if err != nil {
			return err
		}
	}
	if rec.Kind == kindVLAN {
		if others, err := d.linksOn(ctx, name); err != nil || len(others) > 0 {
			if err == nil {
				d.log.Warn("keeping a VLAN link underlay created: links it did not make stand on it", "parent", name, "links", others)
			}
			return err
		}
	}
	if err := d.links.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete parent link %s: %w", name, err)
	}
	d.log.Info("deleted parent link underlay created", "parent", name)
	if err := d.store.Update(func(tx *store.Tx) error {
		if parentNeeded(tx, name) {
			return nil
		}
		return tx.DeleteParentLink(name)
	}); err != nil {
		return err
	}
	if rec.Kind != kindVLAN {
		return nil
	}
	unlock, ok := d.locks.tryExclusive(parentLock(rec.Base))
	if !ok {
		return nil // in use right now; reconsidered at the next start
	}
	defer unlock()
	return d.releaseParent(ctx, rec.Base)
}

// linksOn lists the links whose lower link is the named one.
func (d *Driver) linksOn(ctx context.Context, name string) ([]string, error) {
	l, err := d.links.Get(ctx, name)
	if errors.Is(err, netlinkutil.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	all, err := d.links.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range all {
		if o.ParentIndex == l.Index && o.Index != l.Index {
			out = append(out, o.Name)
		}
	}
	return out, nil
}
