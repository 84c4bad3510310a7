package itest

// A Docker engine of the test's own inside a test namespace, for tests
// that drive underlay through a real dockerd as its legacy plugin (the
// VM's Docker suite, test/vmdocker): dockerd, its containerd and the
// containers' links live in the namespace; the docker CLI talks to it on
// a unix socket of its own.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dockerBinaries are the programs a dockerd of a test's own needs.
var dockerBinaries = []string{"dockerd", "containerd", "containerd-shim-runc-v2", "runc", "docker", "busybox"}

// RequireDocker skips the test when the Docker engine's programs (and
// busybox, for the image) are not in PATH, except inside the test VM and
// in CI, where it fails: there they are part of the setup (test/vm/run.sh
// with VM_DOCKER=1).
func RequireDocker(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	var missing []string
	for _, b := range dockerBinaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	if InVM() || InCI() {
		t.Fatalf("missing %s: the VM needs VM_DOCKER=1 (test/vm/run.sh), the host Debian's docker.io and busybox-static", strings.Join(missing, ", "))
	}
	t.Skipf("skipped: missing %s; run it with `sudo make test-vm-docker`", strings.Join(missing, ", "))
}

// Dockerd is a running dockerd of the test's own.
type Dockerd struct {
	t testing.TB
	// Socket is its API socket; LogPath collects its output.
	Socket, LogPath string
	dir, cli        string
	cmd             *exec.Cmd
	exited          chan struct{}
}

// StartDockerd starts dockerd in ns (no bridge, no iptables, the vfs
// storage driver, cgroupfs; data root under the test's temp dir, exec root
// and socket under /run: unix socket paths are short) with extra
// arguments args, and waits until its API answers. At cleanup it is
// stopped (its containers with it); its log's tail is logged if the test
// failed.
func StartDockerd(t testing.TB, ns *Netns, args ...string) *Dockerd {
	t.Helper()
	RequireDocker(t)
	run, err := os.MkdirTemp("/run", "itest-docker-")
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	d := &Dockerd{t: t, Socket: filepath.Join(run, "docker.sock"), LogPath: filepath.Join(data, "dockerd.log"), dir: run, cli: filepath.Join(data, "cli")}
	logf, err := os.Create(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	bin, _ := exec.LookPath("dockerd")
	args = append([]string{bin, "--data-root", filepath.Join(data, "root"), "--exec-root", filepath.Join(run, "x"),
		"-H", "unix://" + d.Socket, "--pidfile", filepath.Join(run, "docker.pid"),
		"--bridge", "none", "--iptables=false", "--ip-masq=false", "--userland-proxy=false",
		"--storage-driver", "vfs", "--exec-opt", "native.cgroupdriver=cgroupfs"}, args...)
	d.cmd = exec.Command(os.Args[0], args...)
	d.cmd.Env = append(os.Environ(), envExecInNetns+"=1")
	d.cmd.ExtraFiles = []*os.File{ns.File()}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Not in the test's process group: dockerd stops its containers in
	// order at cleanup.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = d.cmd.Start()
	d.cmd.ExtraFiles[0].Close()
	if err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	d.exited = make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("dockerd's log (last lines):\n%s", TailLines(d.Log(), 60))
		}
		_ = os.RemoveAll(run)
	})
	start := time.Now()
	for {
		if _, err := d.Docker("version", "--format", "{{.Server.Version}}"); err == nil {
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("dockerd exited at start (%v):\n%s", d.cmd.ProcessState, TailLines(d.Log(), 30))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("dockerd did not answer on %s within 2m:\n%s", d.Socket, TailLines(d.Log(), 30))
		}
	}
	t.Logf("dockerd answers after %s", time.Since(start).Round(100*time.Millisecond))
	return d
}

// Stop stops dockerd with SIGTERM, with SIGKILL after 60 s.
func (d *Dockerd) Stop() error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("dockerd did not stop within 60s of SIGTERM: killed")
	}
}

// Log returns dockerd's output so far.
func (d *Dockerd) Log() string { return read(d.LogPath) }

// Docker runs the docker CLI against this engine (3 minutes at most) and
// returns its trimmed combined output.
func (d *Dockerd) Docker(args ...string) (string, error) {
	return d.dockerIn(nil, args...)
}

func (d *Dockerd) dockerIn(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DOCKER_HOST=unix://"+d.Socket, "DOCKER_CONFIG="+d.cli)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// Must is Docker that fails the test on an error.
func (d *Dockerd) Must(args ...string) string {
	d.t.Helper()
	out, err := d.Docker(args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// JSON runs docker with a JSON format (--format '{{json ...}}') and
// decodes its answer into v.
func (d *Dockerd) JSON(v any, args ...string) {
	d.t.Helper()
	out := d.Must(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Host is the engine's DOCKER_HOST.
func (d *Dockerd) Host() string { return "unix://" + d.Socket }

// ImportBusybox imports an image named tag (BusyboxImage, given to
// `docker import -`) and returns its ID.
func (d *Dockerd) ImportBusybox(tag string) string {
	d.t.Helper()
	img, err := BusyboxImage()
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.dockerIn(img, "import", "-", tag); err != nil {
		d.t.Fatal(err)
	}
	return d.Must("image", "inspect", "-f", "{{.Id}}", tag)
}

// BusyboxImage is the tar of an image holding busybox (from PATH, static)
// as /bin/busybox with a link in /bin for each of its applets, and /tmp:
// the tests' image, for `docker import` (there is no registry here).
func BusyboxImage() ([]byte, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	hdrs := []*tar.Header{{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))}}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			hdrs = append(hdrs, &tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	for _, h := range hdrs {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Name == "bin/busybox" {
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Ping runs `ping -c 1 -W 1 addr` in container c until it succeeds or
// timeout passes; it returns the last failure.
func (d *Dockerd) Ping(c, addr string, timeout time.Duration) error {
	var err error
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		if _, err = d.Docker("exec", c, "ping", "-c", "1", "-W", "1", addr); err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// LegacyPlugin makes the socket a legacy plugin named name for every
// dockerd on the machine: the spec file /etc/docker/plugins/NAME.spec
// (Docker's plugin discovery), removed at cleanup.
func LegacyPlugin(t testing.TB, name, socket string) {
	t.Helper()
	spec := filepath.Join("/etc/docker/plugins", name+".spec")
	if _, err := os.Stat(spec); err == nil {
		t.Fatalf("%s exists: another plugin is named %s", spec, name)
	}
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte("unix://"+socket+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(spec) })
}

// TailLines is the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
