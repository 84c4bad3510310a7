// Package netnsrun runs a function on an OS thread inside a network
// namespace, so that the sockets it opens belong to that namespace (a
// socket stays in the namespace it was made in). One copy for
// internal/rawlink (the sockets of dhcp, dhcp6 and probe) and the tests.
package netnsrun

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn in namespace h (in the caller's own when h is not open). A
// thread that cannot return to its namespace is ended with its goroutine,
// never reused; what names the namespace in errors ("the prober's").
func Do(h netns.NsHandle, what string, fn func() error) error {
	if !h.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("read this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter %s network namespace: %w", what, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave %s network namespace: %w", what, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
