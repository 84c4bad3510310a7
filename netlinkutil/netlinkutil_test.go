package netlinkutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EBUSY and EADDRINUSE are the kernel's final answers: reported once, with
// what they mean, never retried.
func TestPermanentErrorsAreNotRetried(t *testing.T) {
	k := New()
	k.backoff = time.Millisecond
	for _, tc := range []struct {
		err      error
		attempts int
	}{
		{unix.EBUSY, 1}, {unix.EADDRINUSE, 1}, {unix.EEXIST, 1}, {unix.EINVAL, 1},
		{unix.EINTR, 6}, {unix.EAGAIN, 6}, {unix.ENOBUFS, 6}, {netlink.ErrDumpInterrupted, dumpAttempts},
	} {
		calls := 0
		err := k.retry(context.Background(), func(*netlink.Handle) error { calls++; return fmt.Errorf("op: %w", tc.err) })
		if calls != tc.attempts || err == nil {
			t.Errorf("%v: tried %d times (err %v), want %d", tc.err, calls, err, tc.attempts)
		}
	}
}

// A socket is kept for the next request after a call the kernel answered,
// and closed after one that failed on the way or panicked.
func TestSocketsKeptOnlyAfterSuccess(t *testing.T) {
	k := New()
	var first, second, third *netlink.Handle
	if err := k.with(func(h *netlink.Handle) error { first = h; return nil }); err != nil {
		t.Fatal(err)
	}
	_ = k.with(func(h *netlink.Handle) error { second = h; return fmt.Errorf("add: %w", unix.EEXIST) })
	_ = k.with(func(h *netlink.Handle) error { third = h; return unix.EAGAIN }) // a receive timeout
	var fourth, fifth *netlink.Handle
	_ = k.with(func(h *netlink.Handle) error { fourth = h; return nil })
	func() {
		defer func() { _ = recover() }()
		_ = k.with(func(h *netlink.Handle) error { fifth = h; panic("boom") })
	}()
	sixth := fifth
	_ = k.with(func(h *netlink.Handle) error { sixth = h; return nil })
	if first != second || second != third {
		t.Error("the socket of a call the kernel answered (with or without an error) was not reused")
	}
	if fourth == third {
		t.Error("the socket of a call that timed out was reused")
	}
	if sixth == fifth {
		t.Error("the socket of a call that panicked was reused")
	}
}

func TestExplainPermanentRefusals(t *testing.T) {
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "ule1"}}
	if s := explain(unix.EBUSY, mv); !strings.Contains(s, "other type") {
		t.Errorf("EBUSY on a macvlan explained as %q", s)
	}
	if s := explain(unix.EADDRINUSE, mv); !strings.Contains(s, "another MAC") {
		t.Errorf("EADDRINUSE explained as %q", s)
	}
	if s := explain(unix.EBUSY, &netlink.Vlan{}); s != "" {
		t.Errorf("EBUSY on a VLAN explained as %q", s)
	}
}
