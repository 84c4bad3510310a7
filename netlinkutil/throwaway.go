package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ThrowawayName is the name of a throwaway child in its namespace.
const ThrowawayName = "underlay0"

// Throwaway is a macvlan child of a parent made for one look at the LAN
// (the LAN preflight's new-mac check): it lives in an anonymous network
// namespace of its own, where the host's network managers never see it,
// carries underlay's mark and a MAC of its own, is up, and has IPv6 off so
// that the kernel sends nothing from it on its own (no DAD, no router
// solicitation, no MLD report). Close deletes it.
type Throwaway struct {
	// Netns is the child's namespace; Name its name there.
	Netns netns.NsHandle
	Name  string
	MAC   net.HardwareAddr
	h     *netlink.Handle
}

// AddThrowaway makes a throwaway macvlan child (bridge mode) of parent
// with mac, marked with mark. Making a namespace needs CAP_SYS_ADMIN: the
// error then says so (the managed plugin has only CAP_NET_ADMIN and
// CAP_NET_RAW).
func (k *Kernel) AddThrowaway(ctx context.Context, parent string, mac net.HardwareAddr, mark string) (*Throwaway, error) {
	idx, err := k.index(ctx, parent)
	if err != nil {
		return nil, fmt.Errorf("throwaway child of %s: %w", parent, err)
	}
	ns, err := anonymousNetns()
	if err != nil {
		return nil, err
	}
	t := &Throwaway{Netns: ns, Name: ThrowawayName, MAC: mac}
	fail := func(what string, err error) (*Throwaway, error) {
		t.Close()
		return nil, fmt.Errorf("throwaway child of %s: %s: %w", parent, what, err)
	}
	if t.h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE); err != nil {
		return fail("open its namespace's netlink socket", err)
	}
	attrs := netlink.LinkAttrs{Name: t.Name, ParentIndex: idx, HardwareAddr: mac, Namespace: netlink.NsFd(int(ns))}
	l := &netlink.Macvlan{LinkAttrs: attrs, Mode: macvlanModes[kernel.MacvlanBridge]}
	// Made by the parent's namespace's socket, straight into its own.
	if err := k.retry(ctx, func(h *netlink.Handle) error { return h.LinkAdd(l) }); err != nil {
		t.h.Close()
		t.h = nil
		return fail("create", fmt.Errorf("%w%s", err, explain(err, l)))
	}
	made, err := t.h.LinkByName(t.Name)
	if err != nil {
		return fail("find it in its namespace", err)
	}
	if err := t.h.LinkSetAlias(made, mark); err != nil {
		return fail("mark", err)
	}
	if err := t.h.LinkSetUp(made); err != nil {
		return fail("bring up", err)
	}
	return t, nil
}

// Close deletes the child (only the marked link underlay made there) and
// lets its namespace go.
func (t *Throwaway) Close() error {
	var err error
	if t.h != nil {
		if l, lerr := t.h.LinkByName(t.Name); lerr == nil {
			err = t.h.LinkDel(l)
		}
		t.h.Close()
		t.h = nil
	}
	if t.Netns.IsOpen() {
		err = errors.Join(err, t.Netns.Close())
		t.Netns = netns.None()
	}
	return err
}

// anonymousNetns makes a network namespace with no name (it goes away
// with its last handle) whose new links start with IPv6 off.
func anonymousNetns() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- result{netns.None(), fmt.Errorf("read this thread's network namespace: %w", err)}
			return
		}
		defer orig.Close()
		ns, err := netns.New() // enters it
		if err != nil {
			// unshare may have worked and only the handle failed: a
			// thread that cannot go back ends with its goroutine.
			if serr := netns.Set(orig); serr != nil {
				done <- result{netns.None(), fmt.Errorf("make a network namespace for a throwaway child: %w (and leave it: %w)", err, serr)}
				return
			}
			runtime.UnlockOSThread()
			hint := ""
			if errors.Is(err, unix.EPERM) {
				hint = " (making a network namespace needs CAP_SYS_ADMIN, which the managed plugin does not have: run `underlay doctor --lan` on the host as root)"
			}
			done <- result{netns.None(), fmt.Errorf("make a network namespace for a throwaway child: %w%s", err, hint)}
			return
		}
		var werr error
		for _, key := range []string{"default", "all"} {
			werr = errors.Join(werr, os.WriteFile("/proc/sys/net/ipv6/conf/"+key+"/disable_ipv6", []byte("1"), 0))
		}
		if err := netns.Set(orig); err != nil {
			// This thread cannot go back: end it with its goroutine.
			ns.Close()
			done <- result{netns.None(), fmt.Errorf("leave the throwaway namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		if werr != nil && !errors.Is(werr, os.ErrNotExist) {
			ns.Close()
			done <- result{netns.None(), fmt.Errorf("turn IPv6 off in the throwaway namespace: %w", werr)}
			return
		}
		done <- result{ns, nil}
	}()
	r := <-done
	return r.ns, r.err
}
