package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/underlay-net/underlay/doctor"
)

// DefaultSocket is the socket `underlay serve` serves by default.
const DefaultSocket = "/run/docker/plugins/underlay.sock"

// PluginSockets is where a managed plugin's socket is on the host.
const PluginSockets = "/run/docker/plugins/*/underlay.sock"

// FindSocket picks the daemon's socket: the one given with --socket; else
// the default if it exists; else the managed plugin's if there is exactly
// one (pluginGlob).
func FindSocket(given, def, pluginGlob string) (string, error) {
	if given != "" {
		if _, err := os.Stat(given); err != nil {
			return "", fmt.Errorf("--socket %s: %w: pass the socket underlay serves (underlay serve --socket)", given, err)
		}
		return given, nil
	}
	if _, err := os.Stat(def); err == nil {
		return def, nil
	}
	found, _ := filepath.Glob(pluginGlob)
	sort.Strings(found)
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no underlay socket at %s and no managed plugin's socket matching %s: is underlay running? pass --socket PATH", def, pluginGlob)
	}
	return "", fmt.Errorf("no underlay socket at %s, and %d managed plugin sockets match %s (%s): pick one with --socket", def, len(found), pluginGlob, strings.Join(found, ", "))
}

// Client talks to the daemon's control API.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the daemon on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// State asks for the daemon's state.
func (c *Client) State(ctx context.Context) (State, error) {
	var st State
	err := c.call(ctx, PathState, struct{}{}, &st)
	return st, err
}

// Repair asks the daemon to carry out one action.
func (c *Client) Repair(ctx context.Context, a doctor.Action) (string, error) {
	var r RepairResponse
	err := c.call(ctx, PathRepair, repairRequest(a), &r)
	return r.Result, err
}

// errDaemon marks an error the daemon answered (as opposed to not
// reaching it).
var errDaemon = errors.New("the daemon refused")

func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://underlay"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ask underlay on %s: %w: is the daemon running, and is this its socket?", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("read underlay's answer on %s: %w", c.socket, err)
	}
	var e struct{ Err string }
	isUnderlayError := json.Unmarshal(data, &e) == nil && e.Err != ""
	switch {
	case resp.StatusCode == http.StatusNotFound && isUnderlayError && strings.HasPrefix(e.Err, "underlay does not implement"):
		return fmt.Errorf("underlay on %s does not know %s: it is older than this command; run the same version", c.socket, path)
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusMethodNotAllowed && !isUnderlayError:
		return fmt.Errorf("%s is not underlay's socket: %s answered %s to %s: pass the socket underlay serves with --socket (underlay serve --socket; default %s, a managed plugin's is %s)",
			c.socket, answerer(resp.Header), summary(resp, data), path, DefaultSocket, PluginSockets)
	case resp.StatusCode != http.StatusOK && isUnderlayError:
		return fmt.Errorf("%w: %s", errDaemon, e.Err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s on %s answered %s to %s, not underlay's JSON error: is this underlay's socket? pass the one underlay serves with --socket",
			answerer(resp.Header), c.socket, summary(resp, data), path)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer on %s to %s is not underlay's (%s: %w): is this underlay's socket? pass the one underlay serves with --socket", c.socket, path, summary(resp, data), err)
	}
	return nil
}

// answerer says what answered, from the headers: Docker's Engine API
// sends Api-Version (and Server: Docker/...).
func answerer(h http.Header) string {
	if v := h.Get("Api-Version"); v != "" {
		if srv := h.Get("Server"); srv != "" {
			return fmt.Sprintf("a Docker Engine API (Api-Version %s, Server %q)", v, srv)
		}
		return fmt.Sprintf("a Docker Engine API (Api-Version %s)", v)
	}
	if srv := h.Get("Server"); srv != "" {
		return fmt.Sprintf("the server (Server %q)", srv)
	}
	return "the server"
}

// summaryLen bounds the first line of a body quoted in an error.
const summaryLen = 80

// summary describes an answer in one short line: its status, its content
// type and the first non-empty line of its body, cut at summaryLen (an
// HTML error page is not printed whole).
func summary(resp *http.Response, body []byte) string {
	s := resp.Status
	if s == "" {
		s = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	} else if !strings.HasPrefix(s, fmt.Sprint(resp.StatusCode)) {
		s = fmt.Sprintf("%d %s", resp.StatusCode, s)
	}
	s = "status " + s
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		s += ", " + ct
	}
	line := ""
	for _, l := range strings.Split(string(body), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if line == "" {
		return s + ", empty body"
	}
	if r := []rune(line); len(r) > summaryLen {
		line = string(r[:summaryLen]) + "..."
	}
	return fmt.Sprintf("%s: %q", s, line)
}
