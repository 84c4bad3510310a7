package metrics

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingListener counts the connections accepted and not closed yet,
// and the most there were at once.
type countingListener struct {
	net.Listener
	mu        sync.Mutex
	open, max int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.max = max(l.max, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) counts() (open, max int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.max
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func startTCP(t *testing.T, lim TCPLimits) (*TCPServer, *countingListener) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	s, err := New(Options{Version: "test"}).NewTCPServer(cl, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve after Close: %v, want nil", err)
		}
	})
	return s, cl
}

// waitEOF reads c until the server closes it, and says how long that took;
// it fails the test if that takes longer than within.
func waitEOF(t *testing.T, c net.Conn, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s", within)
	}
	return time.Since(start)
}

// TestTCPServerClosesIdleConnections: a keep-alive connection after its
// scrape, and one that never sends a request, are closed by the server,
// not kept forever.
func TestTCPServerClosesIdleConnections(t *testing.T) {
	lim := DefaultTCPLimits()
	lim.IdleTimeout, lim.ReadHeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
	s, cl := startTCP(t, lim)

	keep, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if _, err := io.WriteString(keep, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(keep), nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("scrape: %v %v (close %v), want 200 keeping the connection", resp, err, resp != nil && resp.Close)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "underlay_build_info") {
		t.Fatalf("scrape answered:\n%s", body)
	}
	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	waitEOF(t, keep, 20*time.Second)
	waitEOF(t, silent, 20*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for open, _ := cl.counts(); open != 0; open, _ = cl.counts() {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open on the server", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTCPServerCapsConnections: however many clients connect, the server
// holds at most MaxConns of them at once; the others wait in the accept
// queue and are served once they are let in.
func TestTCPServerCapsConnections(t *testing.T) {
	lim := DefaultTCPLimits()
	lim.MaxConns, lim.ReadHeaderTimeout = 4, 200*time.Millisecond
	s, cl := startTCP(t, lim)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 40; i++ {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond) // the first few are accepted, time out, the next come in
	if _, most := cl.counts(); most > lim.MaxConns || most == 0 {
		t.Fatalf("the server held %d connections at once, want 1 to %d", most, lim.MaxConns)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// The queue drains (each waiting connection is closed by its client
	// or times out), and a scrape gets through.
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + s.Addr().String() + Path)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape after the flood: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, most := cl.counts(); most > lim.MaxConns {
		t.Fatalf("the server held %d connections at once, want at most %d", most, lim.MaxConns)
	}
}

// TestTCPServerOnlyMetrics: only GET /metrics is served.
func TestTCPServerOnlyMetrics(t *testing.T) {
	s, _ := startTCP(t, DefaultTCPLimits())
	for _, c := range []struct {
		method, path string
		status       int
	}{{http.MethodGet, Path, 200}, {http.MethodPost, Path, 405}, {http.MethodGet, "/Plugin.Activate", 404}} {
		req, _ := http.NewRequestWithContext(context.Background(), c.method, "http://"+s.Addr().String()+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	if _, err := New(Options{}).NewTCPServer(s.l, TCPLimits{}, nil); err == nil {
		t.Error("a cap of 0 connections accepted")
	}
}
