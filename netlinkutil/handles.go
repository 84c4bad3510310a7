package netlinkutil

import (
	"errors"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// handles keeps NETLINK_ROUTE sockets for reuse. A request takes one of its
// own (concurrent requests never queue on a shared socket) and gives it
// back; opening a socket per call (what the library's zero Handle does)
// cost about 0.1 ms a call here, several times the cost of a link lookup.
type handles struct {
	ns   netns.NsHandle
	idle chan *netlink.Handle
}

// idleHandles bounds the sockets kept open while idle; more concurrent
// requests open more and close them afterwards.
const idleHandles = 16

// socketTimeout bounds a send or receive on a kept socket, as the library
// bounds its own per-call sockets.
const socketTimeout = 60 * time.Second

func newHandles(ns netns.NsHandle) *handles {
	return &handles{ns: ns, idle: make(chan *netlink.Handle, idleHandles)}
}

// get returns a handle, or nil and the error of opening one.
func (p *handles) get() (*netlink.Handle, error) {
	select {
	case h := <-p.idle:
		return h, nil
	default:
	}
	h, err := netlink.NewHandleAt(p.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := h.SetSocketTimeout(socketTimeout); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// put gives h back, unless the call on it failed on the way: a socket a
// call gave up on may be in a state the next call should not inherit, so
// it is closed instead.
func (p *handles) put(h *netlink.Handle, failed bool) {
	if !failed {
		select {
		case p.idle <- h:
			return
		default:
		}
	}
	h.Close()
}

// with runs op with a handle of its own. The handle goes back for reuse
// after a call the kernel answered (with or without an error), and is
// closed after one that failed on the way (or panicked).
func (k *Kernel) with(op func(h *netlink.Handle) error) (err error) {
	h, err := k.handles.get()
	if err != nil {
		return err
	}
	clean := false
	defer func() { k.handles.put(h, !clean) }()
	err = op(h)
	clean = err == nil || kernelAnswer(err)
	return err
}

// kernelAnswer reports whether err is the kernel's own answer to a request
// (an errno it sent back, such as ENODEV, EEXIST or EBUSY, or a dump it
// marked interrupted and that was read to its end): the socket holds
// nothing of that call the next one would not skip. A timeout, an overrun,
// an interrupted system call or a message that could not be read is not.
func kernelAnswer(err error) bool {
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, netlink.ErrDumpInterrupted) {
		return true
	}
	var errno unix.Errno
	return errors.As(err, &errno) && !transient(err)
}
