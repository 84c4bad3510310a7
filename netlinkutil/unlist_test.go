package netlinkutil

import (
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// dellink is an RTM_DELLINK message's payload: the ifinfomsg and attrs.
func dellink(family uint8, index int32, name string, extra ...uint16) []byte {
	info := nl.NewIfInfomsg(int(family))
	info.Index = index
	b := info.Serialize()
	b = append(b, nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)).Serialize()...)
	for _, typ := range extra {
		b = append(b, nl.NewRtAttr(int(typ), nl.Uint32Attr(7)).Serialize()...)
	}
	return b
}

func woken(w *deletion) bool {
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// Only the announcement of the waited link's deletion wakes its waiter: not
// a bridge's (AF_BRIDGE) message for the index, not a move of the link to
// another namespace (a container's, at Join), not another name.
func TestAnnounceWakesOnlyTheDeletedLinksWaiters(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
		wake bool
	}{
		{"its deletion", dellink(unix.AF_UNSPEC, 7, "ule1"), true},
		{"a bridge port's leaving", dellink(unix.AF_BRIDGE, 7, "ule1"), false},
		{"moved to another namespace", dellink(unix.AF_UNSPEC, 7, "ule1", unix.IFLA_NEW_NETNSID), false},
		{"moved with a new index", dellink(unix.AF_UNSPEC, 7, "ule1", unix.IFLA_NEW_IFINDEX), false},
		{"another name", dellink(unix.AF_UNSPEC, 7, "eth0"), false},
		{"another index", dellink(unix.AF_UNSPEC, 8, "ule1"), false},
		{"truncated attributes", dellink(unix.AF_UNSPEC, 7, "ule1")[:unix.SizeofIfInfomsg+3], false},
	} {
		d := newDeletions()
		w := &deletion{name: "ule1", gone: make(chan struct{})}
		other := &deletion{name: "ule2", gone: make(chan struct{})}
		d.waiters[7] = []*deletion{w, other}
		d.announce(tc.msg)
		if woken(w) != tc.wake || woken(other) {
			t.Errorf("%s: waiter woken %v (other %v), want %v", tc.name, woken(w), woken(other), tc.wake)
		}
		if got := len(d.waiters[7]); tc.wake && got != 1 || !tc.wake && got != 2 {
			t.Errorf("%s: %d waiters left on index 7", tc.name, got)
		}
	}
}

// forget drops a waiter no announcement took, and the index with its last.
func TestForgetDropsTheWaiter(t *testing.T) {
	d := newDeletions()
	a := &deletion{name: "a", gone: make(chan struct{})}
	b := &deletion{name: "b", gone: make(chan struct{})}
	d.waiters[3] = []*deletion{a, b}
	d.forget(3, a)
	if ws := d.waiters[3]; len(ws) != 1 || ws[0] != b {
		t.Fatalf("after forget(a): %v", ws)
	}
	d.forget(3, b)
	if _, ok := d.waiters[3]; ok {
		t.Fatal("index 3 kept after its last waiter was forgotten")
	}
	d.forget(3, b) // twice: nothing to do
}
