package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// requestGuard bounds what a client of the plugin socket can make the
// daemon wait for. Docker sends a request's body with its headers; a body
// that stops half-way (a client that crashed, or a hostile one) would keep
// its handler reading forever and hold shutdown up for its whole timeout.
//
//   - A body must arrive within bodyTimeout of its headers (a read
//     deadline on the connection while the body is read, cleared the
//     moment it is complete: the handler's own work, a DHCP exchange or a
//     slow kernel call, is not bounded by it, and its context is not
//     cancelled).
//   - Stop gives every body still arriving, and every new connection whose
//     first request's headers are still arriving, grace more, then their
//     reads fail: shutdown waits for requests being answered, not for
//     clients that stopped sending.
//
// http.Server's ReadTimeout is not used: it also runs while the handler
// works once the body is read, and when it fires the server cancels the
// request's context, cancelling a long Join half-way.
type requestGuard struct {
	next        http.Handler
	bodyTimeout time.Duration

	mu       sync.Mutex
	stopping bool
	grace    time.Duration
	// reading are the requests whose body is not complete yet.
	reading map[*guardedBody]struct{}
	// fresh are the connections that have not read a request yet.
	fresh map[net.Conn]struct{}
}

func newRequestGuard(next http.Handler, bodyTimeout time.Duration) *requestGuard {
	return &requestGuard{next: next, bodyTimeout: bodyTimeout, reading: map[*guardedBody]struct{}{}, fresh: map[net.Conn]struct{}{}}
}

// install makes s use the guard: its handler and its connection hook.
func (g *requestGuard) install(s *http.Server) {
	s.Handler = g
	s.ConnState = g.connState
}

func (g *requestGuard) connState(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case http.StateNew:
		if g.stopping {
			_ = c.SetReadDeadline(time.Now().Add(g.grace))
			return
		}
		g.fresh[c] = struct{}{}
	default:
		delete(g.fresh, c)
	}
}

// Stop gives the bodies and first headers still arriving grace more; a
// request read after Stop gets grace for its body too.
func (g *requestGuard) Stop(grace time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopping, g.grace = true, grace
	deadline := time.Now().Add(grace)
	for b := range g.reading {
		b.stopped = true
		_ = b.rc.SetReadDeadline(deadline)
	}
	for c := range g.fresh {
		_ = c.SetReadDeadline(deadline)
	}
	clear(g.fresh)
}

func (g *requestGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		g.next.ServeHTTP(w, r)
		return
	}
	b := &guardedBody{ReadCloser: r.Body, g: g, rc: http.NewResponseController(w)}
	g.mu.Lock()
	timeout := g.bodyTimeout
	if g.stopping {
		timeout, b.stopped = min(timeout, g.grace), true
	}
	b.timeout = timeout
	if err := b.rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		// Not a connection of http.Server (a test's recorder): nothing to
		// bound.
		g.mu.Unlock()
		g.next.ServeHTTP(w, r)
		return
	}
	g.reading[b] = struct{}{}
	g.mu.Unlock()
	defer b.release()
	// A handler that did not read the body to its end (a path underlay
	// does not implement): the rest is read here, still under the
	// deadline Stop can shorten, not after, where the server reads it
	// with whatever deadline is left.
	defer func() { _, _ = io.Copy(io.Discard, io.LimitReader(b, drainLimit)) }()
	r = r.WithContext(r.Context()) // a copy: the server's request keeps its body
	r.Body = b
	g.next.ServeHTTP(w, r)
}

// guardedBody is a request body read under the guard's deadline.
type guardedBody struct {
	io.ReadCloser
	g       *requestGuard
	rc      *http.ResponseController
	timeout time.Duration
	// stopped and done are the guard's (its mu).
	stopped, done bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.finish()
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.g.mu.Lock()
		stopped := b.stopped
		b.g.mu.Unlock()
		if stopped {
			return n, fmt.Errorf("underlay is stopping and the request body was not complete: send the whole body with the request, and send it again to the next underlay: %w", err)
		}
		return n, fmt.Errorf("the request body did not arrive within %s of its headers: send the whole body with the request: %w", b.timeout, err)
	}
	return n, err
}

// finish clears the deadline once the body is complete, so that the
// connection's reads are the server's again.
func (b *guardedBody) finish() {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	delete(b.g.reading, b)
	_ = b.rc.SetReadDeadline(time.Time{})
}

// drainLimit is how much of a body its handler left unread is read after
// it; http.Server closes the connection of a longer rest.
const drainLimit = 256 << 10

// release forgets a body whose handler is done. One not read to its end
// keeps its deadline: the server discards the rest after the handler, and
// a client that stopped sending must not hold it there either.
func (b *guardedBody) release() {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	b.done = true
	delete(b.g.reading, b)
}
