package netlinkutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
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
	// early counts the deletions answered at their announcement.
	early atomic.Uint64
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
func (k *Kernel) DeleteLink(ctx context.Context, l kernel.Link) error {
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
	w, background := d.watch(k.ns, l)
	done := make(chan error, 1)
	del := func() {
		defer func() { <-d.slots }()
		target := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: l.Name, Index: l.Index}}
		done <- k.retry(context.WithoutCancel(ctx), func(h *netlink.Handle) error { return h.LinkDel(target) })
	}
	var gone <-chan struct{}
	if background {
		go func() { defer d.pending.Done(); del() }()
		if w != nil {
			gone = w.gone
			defer d.forget(l.Index, w)
		}
	} else {
		del() // closing: nothing may be left running
	}
	select {
	case <-gone:
		d.early.Add(1)
		return nil // unlisted: the kernel finishes the deletion on its own
	case err := <-done:
		if err == nil || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return fmt.Errorf("delete link %s: %w", l.Name, err)
	}
}

// EarlyDeletes is how many DeleteLink calls returned at their link's
// announcement; the others returned at the kernel's acknowledgement.
func (k *Kernel) EarlyDeletes() uint64 { return k.deletions.early.Load() }

// Close waits for the deletions running in the background (until ctx
// ends) and ends the subscription. DeleteLink calls made from then on run
// to the kernel's acknowledgement.
func (k *Kernel) Close(ctx context.Context) error {
	if s := k.kept.Load(); s != nil {
		s.stop()
	}
	d := k.deletions
	d.mu.Lock()
	d.closed = true
	if d.sub != nil {
		d.sub.Close() // wakes the reader, which then ends
	}
	d.mu.Unlock()
	finished := make(chan struct{})
	go func() { d.pending.Wait(); close(finished) }()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("link deletions still running in the kernel: %w", ctx.Err())
	}
}

// watch registers a wait for l's announcement, starting the subscription
// if none runs, and counts a deletion about to run in the background. It
// returns no wait when there is no subscription, and background false
// once the Kernel is closed.
func (d *deletions) watch(ns netns.NsHandle, l kernel.Link) (w *deletion, background bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, false
	}
	d.pending.Add(1)
	if d.sub == nil {
		s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
		if err != nil {
			return nil, true
		}
		d.sub = s
		go d.read(s)
	}
	w = &deletion{name: l.Name, gone: make(chan struct{})}
	d.waiters[l.Index] = append(d.waiters[l.Index], w)
	return w, true
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
// the announcement of a link's deletion counts: family unspecified (a
// bridge announces a port's leaving with AF_BRIDGE), no IFLA_NEW_NETNSID or
// IFLA_NEW_IFINDEX (a link moved to another namespace, as into a container
// at Join: that message may still be queued when the link, back in the
// host with the same index and name, is deleted), and the waiter's name.
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
	name, moved := deleted(data[unix.SizeofIfInfomsg:])
	if moved {
		return
	}
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

// deleted reads an RTM_DELLINK message's attributes: the link's name, and
// whether the message says the link moved to another namespace.
func deleted(attrs []byte) (name string, moved bool) {
	as, err := nl.ParseRouteAttr(attrs)
	if err != nil {
		return "", false
	}
	for _, a := range as {
		switch a.Attr.Type {
		case unix.IFLA_IFNAME:
			name = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.IFLA_NEW_NETNSID, unix.IFLA_NEW_IFINDEX:
			moved = true
		}
	}
	return name, moved
}
