//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

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

// kernelCycle is endpointCycleUnlisted's kernel work alone: the macvlan's
// add and its delete as Leave answers it, no record. No driver that makes
// and deletes the link does less; at c=16 it shows how much of the floor's
// rate its commits take (the floor has run as fast as it, or faster).
func (f *floor) kernelCycle(w, i int) error {
	l, err := f.addMacvlan(w, i, fmt.Sprintf("flk%03x%08x", w, i), 3)
	if err != nil {
		return err
	}
	return f.kernel.DeleteLink(context.Background(), kernel.Link{Name: l.Name, Index: l.Index})
}

// macvlanCycle is an endpoint cycle of worker w whose link is named
// prefix+w+i, with a MAC of its own (tag tells the floors' apart), and
// deleted by del.
func (f *floor) macvlanCycle(w, i int, prefix string, tag byte, del func(*netlink.Macvlan) error) error {
	name := fmt.Sprintf("%s%03x%08x", prefix, w, i)
	if err := f.commit(name); err != nil {
		return err
	}
	l, err := f.addMacvlan(w, i, name, tag)
	if err != nil {
		return err
	}
	if err := del(l); err != nil {
		return err
	}
	return f.remove(name)
}

// addMacvlan adds worker w's macvlan name on its parent, its MAC the
// floor's with tag xored into the 4th byte and w, i in the last two.
func (f *floor) addMacvlan(w, i int, name string, tag byte) (*netlink.Macvlan, error) {
	mac := append(net.HardwareAddr{}, f.mac...)
	mac[3], mac[4], mac[5] = mac[3]^tag, byte(w), byte(i)
	l := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: f.parents[w], HardwareAddr: mac}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	return l, f.nl[w].LinkAdd(l)
}

// serveProtocol puts endpointCycleUnlisted behind the remote driver
// protocol: a driver with no work of its own, served by net/http on a unix
// socket in this process. Each request's JSON is decoded and its one step
// of the floor done: CreateEndpoint commits the record, Join adds the
// macvlan (and answers its name, as a driver must), Leave deletes it as
// Leave does, DeleteEndpoint deletes the record. At c=1 its cycle against
// the floor's is the most a remote driver that does each step within its
// request can reach in this bench (in process, it is spared a daemon's own
// scheduling, though its client and server share one Go runtime), and
// underlay's against it is the daemon's own cost. The endpoint IDs are the bench's
// (id("c", w, i)): the worker w is read from them.
func (f *floor) serveProtocol(t *testing.T) driverCalls {
	var mu sync.Mutex
	links := map[string]*netlink.Macvlan{} // endpoint ID -> its link, from Join to Leave
	type ids struct{ NetworkID, EndpointID string }
	mux := http.NewServeMux()
	route := func(route string, step func(w, i int, name, ep string) (any, error)) {
		mux.HandleFunc("/NetworkDriver."+route, func(rw http.ResponseWriter, r *http.Request) {
			var req ids
			err := json.NewDecoder(r.Body).Decode(&req)
			var w, i uint64
			if err == nil && len(req.EndpointID) >= 12 {
				w, err = strconv.ParseUint(req.EndpointID[1:4], 16, 16)
				if err == nil {
					i, err = strconv.ParseUint(req.EndpointID[4:12], 16, 32)
				}
			} else if err == nil {
				err = fmt.Errorf("endpoint ID %q is not the bench's", req.EndpointID)
			}
			var out any = struct{}{}
			if err == nil {
				out, err = step(int(w), int(i), "flp"+req.EndpointID[1:12], req.EndpointID)
			}
			rw.Header().Set("Content-Type", "application/vnd.docker.plugins.v1.1+json")
			if err != nil {
				rw.WriteHeader(http.StatusInternalServerError)
				out = map[string]string{"Err": err.Error()}
			}
			_ = json.NewEncoder(rw).Encode(out)
		})
	}
	none := struct{}{}
	route("CreateEndpoint", func(_, _ int, name, _ string) (any, error) { return none, f.commit(name) })
	route("Join", func(w, i int, name, ep string) (any, error) {
		l, err := f.addMacvlan(w, i, name, 2)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		links[ep] = l
		mu.Unlock()
		return map[string]any{"InterfaceName": map[string]string{"SrcName": name, "DstPrefix": "eth"}}, nil
	})
	route("Leave", func(_, _ int, _, ep string) (any, error) {
		mu.Lock()
		l := links[ep]
		delete(links, ep)
		mu.Unlock()
		if l == nil {
			return nil, fmt.Errorf("endpoint %s has not joined", ep)
		}
		return none, f.kernel.DeleteLink(context.Background(), kernel.Link{Name: l.Name, Index: l.Index})
	})
	route("DeleteEndpoint", func(_, _ int, name, _ string) (any, error) { return none, f.remove(name) })

	socket := filepath.Join(t.TempDir(), "floor.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := itest.UnixClient(func() string { return socket }, 2*time.Minute)
	return driverCalls{post: func(path string, body any) (int, []byte, error) { return itest.PostPlugin(client, path, body) }}
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
