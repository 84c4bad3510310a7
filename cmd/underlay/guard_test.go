package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
)

// guarded serves a plugin mux behind a requestGuard on a unix socket, as
// serve does: /NetworkDriver.Slow reads its request, then works for
// work, and answers whether its context was cancelled meanwhile.
func guarded(t *testing.T, bodyTimeout, work time.Duration) (*http.Server, *requestGuard, string, chan error) {
	t.Helper()
	mux := pluginapi.NewMux("NetworkDriver")
	pluginapi.Route(mux, slog.New(slog.DiscardHandler), "/NetworkDriver.Slow", func(ctx context.Context, r *struct{ NetworkID string }) (any, error) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("context cancelled while working: %w", ctx.Err())
		case <-time.After(work):
		}
		return map[string]string{"NetworkID": r.NetworkID}, nil
	})
	sock := filepath.Join(t.TempDir(), "p.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	g := newRequestGuard(mux, bodyTimeout)
	g.install(srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, g, sock, done
}

// halfRequest sends a request's headers and half its body, and leaves
// the connection open.
func halfRequest(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := `{"NetworkID":"n1"}`
	if _, err := fmt.Fprintf(c, "POST /NetworkDriver.Slow HTTP/1.1\r\nHost: underlay\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:7]); err != nil {
		t.Fatal(err)
	}
	return c
}

func readAnswer(t *testing.T, c net.Conn, within time.Duration) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", within, err)
	}
	defer resp.Body.Close()
	var e pluginapi.ErrorResponse
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Err
}

// TestRequestGuardBodyTimeout: a body that stops half-way is answered 400
// after the body timeout, saying so; a request whose body is complete is
// not bounded by it (its handler works longer, its context intact).
func TestRequestGuardBodyTimeout(t *testing.T) {
	_, _, sock, _ := guarded(t, 300*time.Millisecond, time.Second)
	start := time.Now()
	code, msg := readAnswer(t, halfRequest(t, sock), 20*time.Second)
	if code != http.StatusBadRequest || !strings.Contains(msg, "did not arrive within 300ms") || !strings.Contains(msg, "send the whole body") {
		t.Fatalf("half a body: %d %q, want 400 naming the timeout and the fix", code, msg)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("answered after %s, before the body timeout", d)
	}

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for i := 0; i < 2; i++ { // the second on the same keep-alive connection
		resp, err := client.Post("http://underlay/NetworkDriver.Slow", "application/json", strings.NewReader(`{"NetworkID":"n2"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "n2") {
			t.Fatalf("request %d, working 1 s past a body timeout of 300 ms: %d %s", i, resp.StatusCode, b)
		}
	}
}

// TestRequestGuardStop: at shutdown, a body still arriving and a
// connection whose headers are still arriving do not hold Shutdown up
// beyond the grace, while a request being answered is waited for.
func TestRequestGuardStop(t *testing.T) {
	srv, g, sock, served := guarded(t, time.Hour, 1500*time.Millisecond)
	half := halfRequest(t, sock)
	headers, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer headers.Close()
	if _, err := io.WriteString(headers, "POST /NetworkDriver.Slow HTTP/1.1\r\nHost: und"); err != nil {
		t.Fatal(err)
	}
	working := make(chan int, 1)
	go func() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			working <- 0
			return
		}
		defer c.Close()
		body := `{"NetworkID":"n3"}`
		fmt.Fprintf(c, "POST /NetworkDriver.Slow HTTP/1.1\r\nHost: underlay\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		code, _ := readAnswer(t, c, 30*time.Second)
		working <- code
	}()
	time.Sleep(500 * time.Millisecond) // every request is read as far as it goes

	start := time.Now()
	g.Stop(100 * time.Millisecond)
	headersClosed := make(chan time.Duration, 1)
	go func() {
		_ = headers.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.Copy(io.Discard, headers)
		headersClosed <- time.Since(start)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Without the guard, Shutdown closes a new connection only once it
	// has been new for 5 s (4.5 s from here).
	if d := <-headersClosed; d > 3*time.Second {
		t.Errorf("the connection with half its headers was closed %s after Stop, want within the grace", d)
	}
	// The working request (1.5 s, started 0.5 s before) is waited for;
	// the half-sent ones (an hour of body timeout) are not.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Shutdown took %s", d)
	}
	if code := <-working; code != http.StatusOK {
		t.Errorf("the request being answered at shutdown got %d, want 200", code)
	}
	if code, msg := readAnswer(t, half, 5*time.Second); code != http.StatusBadRequest || !strings.Contains(msg, "underlay is stopping") {
		t.Errorf("half a body at shutdown: %d %q, want 400 saying underlay is stopping", code, msg)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Errorf("Serve: %v", err)
	}
}
