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

// A socket is kept for the next request after a call that succeeded, and
// closed after one that failed (it may still hold that call's answers).
func TestSocketsKeptOnlyAfterSuccess(t *testing.T) {
	k := New()
	var first, second, third *netlink.Handle
	if err := k.with(func(h *netlink.Handle) error { first = h; return nil }); err != nil {
		t.Fatal(err)
	}
	_ = k.with(func(h *netlink.Handle) error { second = h; return unix.EINVAL })
	_ = k.with(func(h *netlink.Handle) error { third = h; return nil })
	if first != second {
		t.Error("the socket of a call that succeeded was not reused")
	}
	if third == second {
		t.Error("the socket of a call that failed was reused")
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
