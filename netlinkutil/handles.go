package netlinkutil

import (
	"errors"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// handles keeps NETLINK_ROUTE sockets for reuse. A request takes one of its
// own (concurrent requests never queue on a shared socket) and gives it
// back; opening a socket per call (what the library's zero Handle does)
// cost about 0.1 ms a call here, several times the cost of a link lookup.
type handles struct {
	idle chan *netlink.Handle
}

// idleHandles bounds the sockets kept open while idle; more concurrent
// requests open more and close them afterwards.
const idleHandles = 16

// socketTimeout bounds a send or receive on a kept socket, as the library
// bounds its own per-call sockets.
const socketTimeout = 60 * time.Second

func newHandles() *handles { return &handles{idle: make(chan *netlink.Handle, idleHandles)} }

// get returns a handle, or nil and the error of opening one.
func (p *handles) get() (*netlink.Handle, error) {
	select {
	case h := <-p.idle:
		return h, nil
	default:
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := h.SetSocketTimeout(socketTimeout); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// put gives h back, unless the call on it failed for another reason than
// the kernel's "no such link": a socket a call gave up on may be in a state
// the next call should not inherit, so it is closed instead.
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

// with runs op with a handle of its own.
func (k *Kernel) with(op func(h *netlink.Handle) error) error {
	h, err := k.handles.get()
	if err != nil {
		return err
	}
	err = op(h)
	var nf netlink.LinkNotFoundError
	k.handles.put(h, err != nil && !errors.As(err, &nf) && !errors.Is(err, unix.ENODEV))
	return err
}
