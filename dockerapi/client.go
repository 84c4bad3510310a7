// Package dockerapi is the Docker Engine API client underlay needs: whether
// a network exists (the stale-holder check of CreateNetwork, doctor) and
// the list of every driver's networks (the operator's tools, the IPAM's
// view of subnets in use). It imports nothing of the project; the driver,
// the control CLI and the daemon use it through small interfaces of their
// own.
package dockerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
)

// Client asks Docker's Engine API.
type Client struct {
	host    string
	client  *http.Client
	timeout time.Duration
}

// New returns a client of a Docker host given as unix:///path/docker.sock
// (or tcp://host:port for a daemon on loopback). Each call gives up after
// timeout.
func New(host string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("docker host %q: %w (use unix:///var/run/docker.sock)", host, err)
	}
	tr := &http.Transport{MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return nil, fmt.Errorf("docker host %q has no socket path: use unix:///var/run/docker.sock", host)
		}
		path := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
	case "tcp", "http":
		addr := u.Host
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
	default:
		return nil, fmt.Errorf("docker host %q: scheme %q is not supported: use unix:///path/to/docker.sock", host, u.Scheme)
	}
	return &Client{host: host, client: &http.Client{Transport: tr}, timeout: timeout}, nil
}

// NetworkExists reports whether Docker knows the network (GET
// /networks/{id}); an error means it could not tell. Only Docker's own 404
// (IsNotFound) is a "no".
func (d *Client) NetworkExists(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/networks/"+url.PathEscape(id), nil)
	if err != nil {
		return false, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("ask Docker at %s about network %s: %w", d.host, dockerid.Short(id), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		if IsNotFound(resp.Header, body) {
			return false, nil
		}
		return false, fmt.Errorf("ask Docker at %s about network %s: a 404 that is not Docker's (no Api-Version header or no Docker error body: %q): is DOCKER_HOST (--docker-host) the Docker API socket?",
			d.host, dockerid.Short(id), truncate(strings.TrimSpace(string(body)), 80))
	}
	return false, fmt.Errorf("ask Docker at %s about network %s: status %d: %s", d.host, dockerid.Short(id), resp.StatusCode, truncate(strings.TrimSpace(string(body)), 200))
}

// IsNotFound reports whether a 404 is Docker's own "no such network":
// the Engine API sets Api-Version on every answer and answers errors as
// {"message": "..."}. A proxy's or a web server's 404 is neither.
func IsNotFound(h http.Header, body []byte) bool {
	if h.Get("Api-Version") == "" {
		return false
	}
	var e struct {
		Message *string `json:"message"`
	}
	return json.Unmarshal(body, &e) == nil && e.Message != nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
