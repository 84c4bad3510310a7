//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// floor is what underlay cannot go below, done directly in this process:
// the kernel work of a cycle and the durable writes Docker needs from the
// driver, each in one committed bbolt transaction. For an endpoint cycle
// that is the link add (Join) and delete (Leave) and two records: the
// endpoint's put (CreateEndpoint) and its delete (DeleteEndpoint). Join
// and Leave need no durable write of their own (what they change is over
// when the host boots), and the floor makes none.
type floor struct {
	nl      []*netlink.Handle // one per worker: a handle's socket is not shared
	kernel  *netlinkutil.Kernel
	parents []int // vp<w>'s index, looked up once
	db      *bolt.DB
	mac     net.HardwareAddr
}

func newFloor(t *testing.T, ns *itest.Netns) *floor {
	f := &floor{mac: net.HardwareAddr{0x02, 0x42, 0xc6, 0x12, 0, 1}}
	for w := 0; w < parents; w++ {
		h, err := netlink.NewHandleAt(ns.Handle(), unix.NETLINK_ROUTE)
		if err != nil {
			t.Fatal(err)
		}
		index := 0 // the sections that run no cycles have fewer parents
		if p, err := h.LinkByName(fmt.Sprintf("vp%d", w)); err == nil {
			index = p.Attrs().Index
		}
		f.nl, f.parents = append(f.nl, h), append(f.parents, index)
	}
	db, err := bolt.Open(filepath.Join(t.TempDir(), "floor.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	f.db = db
	f.kernel = netlinkutil.NewAt(ns.Handle())
	t.Cleanup(func() {
		_ = f.kernel.Close(context.Background())
		db.Close()
		for _, h := range f.nl {
			h.Close()
		}
	})
	return f
}

func (f *floor) commit(key string) error {
	rec, _ := json.Marshal(map[string]string{"id": key, "link": "x", "mac": f.mac.String()})
	return f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(key), rec) })
}

func (f *floor) remove(key string) error {
	return f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Delete([]byte(key)) })
}

// endpointCycle: put the record, add the macvlan, delete it (waiting for
// the kernel's acknowledgement), delete the record.
func (f *floor) endpointCycle(w, i int) error {
	return f.macvlanCycle(w, i, "flr", 0, func(l *netlink.Macvlan) error { return f.nl[w].LinkDel(l) })
}

// endpointCycleUnlisted is endpointCycle with the link's deletion answered
// as underlay's Leave answers it: once the kernel has taken the link out of
// the namespace, its cleanup left to run on (netlinkutil's DeleteLink).
// Against it, the cycle's ratio is the daemon's own cost.
func (f *floor) endpointCycleUnlisted(w, i int) error {
	return f.macvlanCycle(w, i, "fly", 1, func(l *netlink.Macvlan) error {
		return f.kernel.DeleteLink(context.Background(), kernel.Link{Name: l.Name, Index: l.Index})
	})
}

// macvlanCycle is an endpoint cycle of worker w whose link is named
// prefix+w+i, with a MAC of its own (tag, xored into its 4th byte, tells
// the two floors' apart), and
// deleted by del.
func (f *floor) macvlanCycle(w, i int, prefix string, tag byte, del func(*netlink.Macvlan) error) error {
	name := fmt.Sprintf("%s%03x%08x", prefix, w, i)
	if err := f.commit(name); err != nil {
		return err
	}
	mac := append(net.HardwareAddr{}, f.mac...)
	mac[3], mac[4], mac[5] = mac[3]^tag, byte(w), byte(i)
	l := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: f.parents[w], HardwareAddr: mac}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := f.nl[w].LinkAdd(l); err != nil {
		return err
	}
	if err := del(l); err != nil {
		return err
	}
	return f.remove(name)
}

// networkCycle: CreateNetwork's parent lookup and record, DeleteNetwork's
// record delete: the two durable writes Docker needs.
func (f *floor) networkCycle(w, i int) error {
	if _, err := f.nl[w].LinkByName(fmt.Sprintf("vp%d", w)); err != nil {
		return err
	}
	key := id("f", w, i)
	if err := f.commit(key); err != nil {
		return err
	}
	return f.remove(key)
}
