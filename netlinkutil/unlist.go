package netlinkutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Deleting a link has two parts in the kernel. Under the rtnl lock it takes
// the link out of the namespace (its name, index and MAC are free again and
// the kernel announces RTM_DELLINK), then, after unlocking, it waits for RCU
// grace periods before it frees the device and acknowledges the request:
// 12-24 ms here for a macvlan, most of an endpoint's Leave. Nothing anyone
// can observe changes during the second part, so DeleteLink answers as soon
// as the announcement of the link's deletion arrives, and the request runs
// to its end in the background. Without the announcement (no subscription,
// or an event lost to a full socket buffer) it waits for the acknowledgement
// as before.
type deletions struct {
	mu sync.Mutex
	// sub is the RTNLGRP_LINK subscription, nil when none runs.
	sub     *nl.NetlinkSocket
	waiters map[int][]*deletion
	closed  bool
	// pending counts deletions still running in the background; slots
	// bounds them (each holds an OS thread in the kernel).
	pending sync.WaitGroup
	slots   chan struct{}
}

// deletion is one DeleteLink waiting for its link's announcement.
type deletion struct {
	name string
	gone chan struct{}
}

// backgroundDeletions bounds the deletions left running in the background;
// with all taken, DeleteLink waits for a slot.
const backgroundDeletions = 64

func newDeletions() *deletions {
	return &deletions{waiters: map[int][]*deletion{}, slots: make(chan struct{}, backgroundDeletions)}
}

// DeleteLink implements Links.
func (k *Kernel) DeleteLink(ctx context.Context, l Link) error {
	d := k.deletions
	select {
	case d.slots <- struct{}{}:
	default:
		select { // all taken: wait for one, as long as the request may
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("delete link %s: %d deletions still running in the kernel: %w", l.Name, backgroundDeletions, ctx.Err())
		}
	}
	w := d.watch(k.ns, l)
	done := make(chan error, 1)
	d.pending.Add(1)
	go func() {
		defer func() { <-d.slots; d.pending.Done() }()
		target := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: l.Name, Index: l.Index}}
		done <- k.retry(context.WithoutCancel(ctx), func(h *netlink.Handle) error { return h.LinkDel(target) })
	}()
	var gone <-chan struct{}
	if w != nil {
		gone = w.gone
		defer d.forget(l.Index, w)
	}
	select {
	case <-gone:
		return nil // unlisted: the kernel finishes the deletion on its own
	case err := <-done:
		if err == nil || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return fmt.Errorf("delete link %s: %w", l.Name, err)
	}
}

// Close waits for the deletions running in the background and ends the
// subscription. DeleteLink must not be called after Close.
func (k *Kernel) Close() {
	d := k.deletions
	d.pending.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.sub != nil {
		d.sub.Close() // wakes the reader, which then ends
	}
}

// watch registers a wait for l's announcement, starting the subscription
// if none runs. It returns nil when there is no subscription to wait on.
func (d *deletions) watch(ns netns.NsHandle, l Link) *deletion {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.sub == nil {
		s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
		if err != nil {
			return nil
		}
		d.sub = s
		go d.read(s)
	}
	w := &deletion{name: l.Name, gone: make(chan struct{})}
	d.waiters[l.Index] = append(d.waiters[l.Index], w)
	return w
}

// forget drops w if no announcement took it.
func (d *deletions) forget(index int, w *deletion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.waiters[index]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(d.waiters, index)
	} else {
		d.waiters[index] = ws
	}
}

// read hands each RTM_DELLINK announcement to the deletions waiting for it
// until the Kernel is closed or the socket fails. Events lost to a full
// buffer (ENOBUFS) only make their waiters wait for the acknowledgement.
func (d *deletions) read(s *nl.NetlinkSocket) {
	defer func() {
		d.mu.Lock()
		if d.sub == s {
			d.sub = nil
		}
		d.mu.Unlock()
		s.Close()
	}()
	for {
		msgs, from, err := s.Receive()
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return // closed, or a socket that cannot be read: the next watch opens another
		}
		if from.Pid != nl.PidKernel {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type == unix.RTM_DELLINK && len(m.Data) >= unix.SizeofIfInfomsg {
				d.announce(m.Data)
			}
		}
	}
}

// announce wakes the waiters of the link an RTM_DELLINK message names. Only
// a link's own announcement (family unspecified: a bridge announces a
// port's leaving with AF_BRIDGE) with the waiter's name counts.
func (d *deletions) announce(data []byte) {
	info := nl.DeserializeIfInfomsg(data)
	if info.Family != unix.AF_UNSPEC {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.waiters[int(info.Index)]
	if len(ws) == 0 {
		return
	}
	name := ifname(data[unix.SizeofIfInfomsg:])
	kept := ws[:0]
	for _, w := range ws {
		if w.name == name {
			close(w.gone)
		} else {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		delete(d.waiters, int(info.Index))
	} else {
		d.waiters[int(info.Index)] = kept
	}
}

// ifname is the IFLA_IFNAME attribute of a link message, "" if none.
func ifname(attrs []byte) string {
	as, err := nl.ParseRouteAttr(attrs)
	if err != nil {
		return ""
	}
	for _, a := range as {
		if a.Attr.Type == unix.IFLA_IFNAME {
			return string(bytes.TrimRight(a.Value, "\x00"))
		}
	}
	return ""
}
