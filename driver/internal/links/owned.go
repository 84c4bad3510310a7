package links

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
)

// Store is the state as owned links read and change it (*store.DB).
type Store interface {
	View(func(*store.Tx) error) error
	Update(func(*store.Tx) error) error
	Batch(func(*store.Tx) error) error
}

// BlockMover moves the blocks of lost leases on a parent to its new name
// (netlinkutil.Kernel's MoveBlocks); tag is the instance's mark.
type BlockMover interface {
	MoveBlocks(ctx context.Context, from, to, tag string) ([]netip.Addr, error)
}

// Owned are the links underlay owns, as this instance (Mark) sees them.
type Owned struct {
	Kernel   netlinkutil.Links
	Store    Store
	Locks    keylock.Trier
	Parents  *Maker
	Resolver *Resolver
	Mark     string // this instance's link mark, also the blocks' tag
	// Blocks moves the blocks of lost leases when Follow follows a
	// renamed VLAN; nil: the link layer cannot block.
	Blocks BlockMover
	Log    *slog.Logger
	Now    func() time.Time
	// Deleting is told of every link Delete deletes, so the repair
	// watcher does not take its going for a repair to make.
	Deleting *SelfDeletions
}

// ErrBusy ends a plan's steps when a parent link is locked by a request:
// they are planned again at the janitor's next tick or the next start.
var ErrBusy = errors.New("parent link in use by a request")

// TryParent takes a parent link's lock for a plan's step, unless the
// caller holds it already (held); ErrBusy when a request has it.
func (o *Owned) TryParent(name, held string) (func(), error) {
	if name == held {
		return func() {}, nil
	}
	unlock, ok := o.Locks.TryExclusive(keylock.ParentKey(name))
	if !ok {
		return nil, ErrBusy
	}
	return unlock, nil
}

// Delete is the one way underlay deletes a link: only one that is its own
// (plan.OwnsLink); recorded says a record of this state file names it. A
// missing link is not an error; another owner's link is left alone with a
// warning.
func (o *Owned) Delete(ctx context.Context, name string, recorded bool) error {
	l, err := o.Kernel.Get(ctx, name)
	if errors.Is(err, netlinkutil.ErrNotFound) || (err == nil && l.Name != name) {
		return nil
	}
	if err != nil {
		return err
	}
	if !plan.OwnsLink(l, o.Mark, recorded) {
		o.Log.Warn("not deleting a link underlay did not create here", "link", name, "mark", l.Alias, "own_mark", o.Mark)
		return nil
	}
	o.Deleting.Add(l.Index, o.Now())
	return o.Kernel.DeleteLink(ctx, l)
}

// Needed is plan.Snapshot's needed inside a transaction: whether a
// network names the parent link, or an owned link standing on it is
// needed.
func Needed(tx *store.Tx, name string) bool {
	if tx.ParentInUse(name) {
		return true
	}
	for _, upper := range tx.ParentLinksOn(name) {
		if Needed(tx, upper) {
			return true
		}
	}
	return false
}
