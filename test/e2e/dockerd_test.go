//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// startDockerd starts the suite's dockerd in the namespace and waits for
// its API.
func (e *env) startDockerd() error {
	logf, err := os.OpenFile(filepath.Join(dataDir, "dockerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append(append([]string{"--net=" + nsPath, "--"}, engineArgv()...),
		"--config-file", filepath.Join(dataDir, "daemon.json"),
		"--data-root", filepath.Join(dataDir, "root"),
		"--exec-root", execRoot,
		"-H", "unix://"+sockPath,
		"--pidfile", pidPath,
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--cgroup-parent", cgroupParent,
		"--shutdown-timeout", "5",
	)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Not in the test's process group: a Ctrl-C reaches the suite, which
	// then stops dockerd in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.mu.Lock()
	e.dockerd, e.exited = cmd, exited
	e.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if pingDocker() == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("dockerd exited at start (%v); its log:\n%s", cmd.ProcessState, itest.TailLines(readFile(filepath.Join(dataDir, "dockerd.log")), 30))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("dockerd did not answer on " + sockPath + " within 60s")
		}
	}
}

// stopDockerd stops the suite's dockerd with SIGTERM (SIGKILL after 60 s).
func (e *env) stopDockerd() error {
	e.mu.Lock()
	cmd, exited := e.dockerd, e.exited
	e.dockerd = nil
	e.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if stopProcess(cmd, exited, 60*time.Second) {
		return errors.New("dockerd did not stop within 60s of SIGTERM: killed")
	}
	return nil
}

func (e *env) restartDockerd(t *testing.T) {
	t.Helper()
	start := time.Now()
	containerd := containerdPid()
	if err := e.stopDockerd(); err != nil {
		t.Fatal(err)
	}
	// As a service manager does, start the new engine once the old one's
	// containerd and plugin are gone: a dockerd 20.10 that starts while
	// they are still stopping finds the plugin's containerd task half
	// deleted ("id already in use") and panics in libnetwork's remote
	// driver (seen once in CI).
	if containerd > 0 {
		waitGone(containerd, 60*time.Second)
	}
	eventually(t, 30*time.Second, "the old plugin process gone", func() error {
		if p := pluginPids(); len(p) > 0 {
			return fmt.Errorf("still running: %v", p)
		}
		return nil
	})
	if err := e.startDockerd(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dockerd restarted in %s", time.Since(start).Round(time.Millisecond))
}

// crashDockerd kills the suite's dockerd with SIGKILL (its containerd dies
// with it; shims, containers and plugins keep running) and starts it again.
func (e *env) crashDockerd(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	cmd, exited := e.dockerd, e.exited
	e.dockerd = nil
	e.mu.Unlock()
	if cmd == nil {
		t.Fatal("dockerd is not running")
	}
	containerd := containerdPid()
	_ = cmd.Process.Kill()
	<-exited
	// dockerd's containerd dies with it (parent-death signal). dockerd
	// 20.10 at start takes a containerd pid that still exists for a live
	// containerd and waits for its socket in vain, so wait until the dead
	// one is reaped (this machine's init reaps orphans late).
	if containerd > 0 {
		start := time.Now()
		for time.Since(start) < 60*time.Second {
			if err := syscall.Kill(containerd, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("old containerd %d gone after %s", containerd, time.Since(start).Round(time.Millisecond))
	}
	if err := e.startDockerd(); err != nil {
		t.Fatal(err)
	}
	t.Log("dockerd killed with SIGKILL and started again")
}

// containerdPid is the pid of the suite engine's containerd (0 if none).
func containerdPid() int {
	pid, _ := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(execRoot, "containerd", "containerd.pid"))))
	return pid
}

// pingDocker asks the suite's API for /_ping.
func pingDocker() error { return pingSocket(sockPath) }

// pingSocket asks the Docker API on a unix socket for /_ping.
func pingSocket(path string) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
	resp, err := c.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/_ping: %s", resp.Status)
	}
	return nil
}

// importImage imports the tests' busybox image (itest.BusyboxImage).
func (e *env) importImage() error {
	img, err := itest.BusyboxImage()
	if err != nil {
		return err
	}
	tarball := filepath.Join(dataDir, "bb.tar")
	if err := os.WriteFile(tarball, img, 0o644); err != nil {
		return err
	}
	if _, err := e.docker("import", tarball, imageTag); err != nil {
		return err
	}
	e.image, err = e.docker("image", "inspect", "-f", "{{.Id}}", imageTag)
	return err
}

// cliEnv is the environment of docker CLI calls: the suite's engine, and a
// CLI config of the suite's own.
func (e *env) cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			env = append(env, kv)
		}
	}
	return append(env, "DOCKER_HOST=unix://"+sockPath, "DOCKER_CONFIG="+filepath.Join(dataDir, "cli"))
}

// docker runs the 20.10 CLI against the suite's engine and returns its
// trimmed combined output.
func (e *env) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dockerCLI, args...)
	cmd.Env = e.cliEnv()
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// jsonOut runs docker with a JSON format and decodes the answer.
func (e *env) jsonOut(v any, args ...string) error {
	out, err := e.docker(args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// markLog and logSinceMark give the part of dockerd.log (which holds the
// plugin's output) written since the mark.
func (e *env) markLog() {
	fi, err := os.Stat(filepath.Join(dataDir, "dockerd.log"))
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logOffset = 0
	if err == nil {
		e.logOffset = fi.Size()
	}
}

func (e *env) logSinceMark() string {
	e.mu.Lock()
	off := e.logOffset
	e.mu.Unlock()
	s := readFile(filepath.Join(dataDir, "dockerd.log"))
	if int64(len(s)) < off {
		return s
	}
	return s[off:]
}
