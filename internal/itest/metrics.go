package itest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Get sends GET path on the daemon's socket and returns the status and the
// body.
func (d *Daemon) Get(path string) (int, []byte, error) {
	resp, err := d.client.Get("http://underlay" + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// Scrape GETs /metrics on the daemon's socket and parses it (series ->
// value); it fails the test when the daemon does not answer 200 with a
// parsable text.
func (d *Daemon) Scrape() map[string]float64 {
	d.t.Helper()
	code, body, err := d.Get("/metrics")
	if err != nil || code != http.StatusOK {
		d.t.Fatalf("GET /metrics on the socket: %d %s (%v)", code, body, err)
	}
	m, err := Metrics(string(body))
	if err != nil {
		d.t.Fatalf("GET /metrics: %v\n%s", err, body)
	}
	return m
}

// HTTPGet GETs url over TCP from inside the namespace (where a daemon's
// 127.0.0.1 is), and returns the status and the body.
func (n *Netns) HTTPGet(url string) (int, []byte, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = n.Do(func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// FreePort returns a TCP port of 127.0.0.1 that is free in the namespace
// (it was bound and released).
func (n *Netns) FreePort() int {
	n.t.Helper()
	var port int
	if err := n.Do(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	}); err != nil {
		n.t.Fatalf("find a free port in the namespace: %v", err)
	}
	return port
}

// Metrics parses Prometheus's text format into the value of each series,
// keyed as the text names it: `name` or `name{label="value",...}` (labels
// in the order the exposition writes them, sorted by name).
func Metrics(text string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// WaitMetric waits until the daemon's /metrics (on its socket) shows the
// series with the value.
func WaitMetric(t testing.TB, d *Daemon, series string, want float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got float64
	for {
		if code, body, err := d.Get("/metrics"); err == nil && code == http.StatusOK {
			if m, err := Metrics(string(body)); err == nil {
				if got = m[series]; got == want {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s is %v after %s, want %v", series, got, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
