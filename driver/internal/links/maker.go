package links

import (
	"context"
	"errors"
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
	"golang.org/x/sys/unix"
)

// Maker creates parent links marked with Mark.
type Maker struct {
	Links netlinkutil.Links
	Mark  string
}

// Create creates a parent link underlay owns. The kernel's
// EEXIST is success only when the existing link is exactly the one planned
// (made by a previous attempt of this network): a VLAN with the same ID
// under another name, or another link with the name, is an error naming it.
func (m *Maker) Create(ctx context.Context, p record.ParentLink) error {
	var err error
	switch p.Kind {
	case kernel.KindVLAN:
		err = m.Links.AddVLAN(ctx, p.Name, p.Base, p.VLAN, p.MTU, m.Mark)
	case kernel.KindDummy:
		err = m.Links.AddDummy(ctx, p.Name, p.MTU, m.Mark)
	default:
		return fmt.Errorf("parent link %s has unknown kind %q", p.Name, p.Kind)
	}
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	links, lerr := m.Links.List(ctx)
	if lerr != nil {
		return fmt.Errorf("%w (and listing links to see which one: %w)", err, lerr)
	}
	if l, ok := plan.FindLink(links, p.Name); ok && plan.IsPlanned(l, p, links, m.Mark) {
		return nil
	}
	if p.Kind == kernel.KindVLAN {
		b, bok := plan.FindLink(links, p.Base)
		for _, l := range links {
			if !bok || l.Kind != kernel.KindVLAN || l.ParentIndex != b.Index || l.VLAN != p.VLAN {
				continue
			}
			if l.Alias == m.Mark {
				return errRenamed{vlan: p.VLAN, base: p.Base, from: p.Name, to: l.Name}
			}
			return fmt.Errorf("%w: create VLAN %d on %s as %s: the kernel already has that VLAN as %s, made by someone else (mark %q): use -o parent=%s, or remove %s", pluginapi.ErrConflict, p.VLAN, p.Base, p.Name, l.Name, l.Alias, l.Name, l.Name)
		}
		if _, named := plan.FindLink(links, p.Name); !named && bok {
			return fmt.Errorf("%w: create VLAN %d on %s as %s: the kernel answers that it exists (%w), but no link of this namespace has that name or VLAN %d on %s: a link with that VLAN ID was probably moved into another network namespace (ip link set ... netns NS), where it keeps the ID; move it back (ip -n NS link set ... netns 1) or delete it there",
				pluginapi.ErrConflict, p.VLAN, p.Base, p.Name, err, p.VLAN, p.Base)
		}
	}
	return fmt.Errorf("%w: create %s link %s: a link of that name exists and is not the one planned: remove it or use another parent (%w)", pluginapi.ErrConflict, p.Kind, p.Name, err)
}

// errRenamed is Create's answer when the VLAN it would create
// exists under another name with this instance's mark: an operator renamed
// it, and the record must follow it.
type errRenamed struct {
	vlan       int
	base, from string
	to         string
}

func (e errRenamed) Error() string {
	return fmt.Sprintf("VLAN %d on %s, which underlay created as %s, was renamed to %s (it carries this underlay's mark)", e.vlan, e.base, e.from, e.to)
}

// RenamedTo reports the new name of an owned VLAN Create found
// renamed.
func RenamedTo(err error) (string, bool) {
	var r errRenamed
	if errors.As(err, &r) {
		return r.to, true
	}
	return "", false
}
