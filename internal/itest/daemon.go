package itest

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
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Daemon is a running `underlay serve` inside a test namespace.
type Daemon struct {
	t      testing.TB
	ns     *Netns
	bin    string
	dir    string
	args   []string
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
	// Socket and State are the paths the daemon uses.
	Socket, State string
	// LogPath collects stdout and stderr of every run.
	LogPath string
	client  *http.Client
}

// DaemonOptions tune StartDaemon.
type DaemonOptions struct {
	// Args are extra arguments after `serve --socket S --state F`.
	Args []string
	// Env is added to the environment (e.g. UNDERLAY_CRASH_AT=point).
	Env []string
	// Dir holds the socket, state and log; default a new temp dir.
	Dir string
	// Socket is the socket's path; default underlay.sock in Dir.
	Socket string
}

// StartDaemon starts the underlay binary in ns and waits until its socket
// answers. It is killed at cleanup, and its log is printed if the test
// failed.
func StartDaemon(t testing.TB, ns *Netns, o DaemonOptions) *Daemon {
	t.Helper()
	d := NewDaemon(t, ns, o)
	d.Start()
	return d
}

// NewDaemon is StartDaemon without the start: Start or StartNoWait run it.
func NewDaemon(t testing.TB, ns *Netns, o DaemonOptions) *Daemon {
	t.Helper()
	dir := o.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	socket := o.Socket
	if socket == "" {
		socket = filepath.Join(dir, "underlay.sock")
	}
	d := &Daemon{t: t, ns: ns, bin: Binary(t), dir: dir, args: o.Args, env: o.Env,
		Socket: socket, State: filepath.Join(dir, "underlay.db"), LogPath: filepath.Join(dir, "underlay.log")}
	d.client = UnixClient(func() string { return d.Socket }, 120*time.Second)
	t.Cleanup(func() {
		d.Kill()
		if t.Failed() {
			log, _ := os.ReadFile(d.LogPath)
			t.Logf("underlay log:\n%s", log)
		}
	})
	return d
}

// Command returns the command that runs the daemon's binary with args in
// the namespace, its output appended to the log.
func (d *Daemon) Command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{d.bin}, args...)...)
	cmd.Env = append(append(os.Environ(), envExecInNetns+"=1", "DOCKER_HOST=unix://"+filepath.Join(d.dir, "no-docker.sock")), env...)
	cmd.ExtraFiles = []*os.File{d.ns.File()}
	return cmd
}

// Start starts the daemon (again) and waits for its socket.
func (d *Daemon) Start() {
	d.t.Helper()
	if err := d.StartNoWait(); err != nil {
		d.t.Fatal(err)
	}
	if err := d.WaitReady(ReadyWait()); err != nil {
		d.t.Fatal(err)
	}
}

// ReadyWait is how long a daemon that was started may take to serve: 15 s,
// and 60 s in the test VM, where one emulated CPU shares the host with make
// test's other lanes (a start there once took 5 s to restore its state
// and more than 10 s more to serve, the host building the engine beside
// it).
func ReadyWait() time.Duration {
	if InVM() {
		return 60 * time.Second
	}
	return 15 * time.Second
}

// StartNoWait starts the daemon without waiting for its socket.
func (d *Daemon) StartNoWait() error {
	log, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--socket", d.Socket, "--state", d.State, "--log-level", "debug"}, d.args...)
	d.cmd = d.Command(d.env, args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	err = d.cmd.Start()
	for _, f := range d.cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		log.Close()
		return fmt.Errorf("start underlay: %w", err)
	}
	d.exited = make(chan struct{})
	cmd, exited := d.cmd, d.exited
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	return nil
}

// WaitReady waits until /Plugin.Activate answers.
func (d *Daemon) WaitReady(timeout time.Duration) error {
	return d.WaitReadyPoll(timeout, 20*time.Millisecond)
}

// WaitReadyPoll is WaitReady polling every interval.
func (d *Daemon) WaitReadyPoll(timeout, interval time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			log, _ := os.ReadFile(d.LogPath)
			return fmt.Errorf("underlay exited before serving (%v):\n%s", d.cmd.ProcessState, log)
		default:
		}
		if code, _, err := d.Post("/Plugin.Activate", nil); err == nil && code == 200 {
			return nil
		}
		time.Sleep(interval)
	}
	return fmt.Errorf("underlay did not serve %s within %s", d.Socket, timeout)
}

// Exited is closed when the current run has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// ProcessState is the exit state of the last run.
func (d *Daemon) ProcessState() *os.ProcessState { return d.cmd.ProcessState }

// Pid is the process ID of the current run.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the exit.
func (d *Daemon) Kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// Stop sends SIGTERM and waits up to 30 s for a clean exit.
func (d *Daemon) Stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if !d.cmd.ProcessState.Success() {
			return fmt.Errorf("underlay exited with %v after SIGTERM", d.cmd.ProcessState)
		}
		return nil
	case <-time.After(30 * time.Second):
		d.Kill()
		return errors.New("underlay did not exit within 30s of SIGTERM")
	}
}

// Restart kills the daemon with SIGKILL and starts it again.
func (d *Daemon) Restart() {
	d.t.Helper()
	d.Kill()
	d.Start()
}

// Post sends one protocol request; body is marshalled unless it is a
// []byte or a string, sent as is.
func (d *Daemon) Post(path string, body any) (int, []byte, error) {
	return PostPlugin(d.client, path, body)
}

// UnixClient is an HTTP client whose every connection is to the unix
// socket at socket(), read at each dial.
func UnixClient(socket func() string, timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket())
	}}, Timeout: timeout}
}

// PostPlugin sends one plugin protocol request to path on c (a
// UnixClient); body is marshalled unless it is a []byte or a string, sent
// as is. It returns the answer's status and body.
func PostPlugin(c *http.Client, path string, body any) (int, []byte, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return 0, nil, err
		}
	}
	resp, err := c.Post("http://underlay"+path, "application/vnd.docker.plugins.v1.1+json", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// Call sends a /NetworkDriver.<route> request. It returns the protocol
// error ("" on success) and decodes a successful answer into out.
func (d *Daemon) Call(route string, req, out any) string {
	d.t.Helper()
	code, body, err := d.Post("/NetworkDriver."+route, req)
	if err != nil {
		d.t.Fatalf("%s: %v", route, err)
	}
	var e struct{ Err string }
	if code != http.StatusOK {
		if jerr := json.Unmarshal(body, &e); jerr != nil || e.Err == "" {
			d.t.Fatalf("%s answered %d with %q: want {\"Err\": ...}", route, code, body)
		}
		return e.Err
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			d.t.Fatalf("%s answered %q: %v", route, body, err)
		}
	}
	return ""
}

// MustCall is Call that fails the test on a protocol error.
func (d *Daemon) MustCall(route string, req, out any) {
	d.t.Helper()
	if msg := d.Call(route, req, out); msg != "" {
		d.t.Fatalf("%s: %s", route, msg)
	}
}

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// WaitLog waits up to timeout until the daemon's log contains s, and
// reports whether it did: for lines the daemon writes in the background
// (renewals, repairs, releases) or after the state a test waited for.
func (d *Daemon) WaitLog(timeout time.Duration, s string) bool {
	return WaitFor(timeout, func() bool { return strings.Contains(d.Log(), s) })
}
