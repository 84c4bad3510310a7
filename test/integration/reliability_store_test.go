package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/store"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// startFails runs `underlay serve` on the state file and wants a quick
// non-zero exit whose message contains every string in want.
func startFails(t *testing.T, d *itest.Daemon, state string, want ...string) {
	t.Helper()
	cmd := d.Command(nil, "serve", "--socket", filepath.Join(t.TempDir(), "u.sock"), "--state", state)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("underlay started on %s; output %q", state, out.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("underlay did not exit on %s", state)
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("start on a faulty state file said %q, want it to mention %q", out.String(), w)
		}
	}
}

func TestStoreFaultsAtStart(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(d.State)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, data := range map[string][]byte{
		"corrupt":   bytes.Repeat([]byte("not a database "), 1000),
		"truncated": good[:len(good)/3],
		"zero-meta": append(make([]byte, 8192), good[8192:]...),
	} {
		p := write(name, data)
		startFails(t, d, p, p, "corrupt", "move it aside")
		if now, _ := os.ReadFile(p); !bytes.Equal(now, data) {
			t.Fatalf("%s: the faulty state file was modified", name)
		}
	}
	newer := write("newer", good)
	db, err := bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte(fmt.Sprint(store.SchemaVersion+1)))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	startFails(t, d, newer, newer, "newer schema", fmt.Sprintf("version %d", store.SchemaVersion+1))

	// A read-only state directory.
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ro, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(ro, unix.MNT_DETACH)
	startFails(t, d, filepath.Join(ro, "underlay", "underlay.db"), filepath.Join(ro, "underlay"), "read-only")

	// The good file still works.
	d.Start()
	if msg := d.CreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}); msg != "" {
		t.Fatal(msg)
	}
	_ = ns
}

// TestDiskFullDuringCommit: when the state file's disk fills up, requests
// that must commit fail with a clear error and leave no half-written
// record; once space is back, everything works and nothing was lost.
func TestDiskFullDuringCommit(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: dir})
	// Fill the disk but for a few pages.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-48<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	var ok []string
	var failed string
	for i := 0; i < 2000 && failed == ""; i++ {
		id := hexID("d", i)
		msg := d.CreateNetwork(itest.Net{ID: id, Opts: map[string]string{"parent": "vp0"}, V4: []string{subnet30(i)}})
		if msg == "" {
			ok = append(ok, id)
			continue
		}
		failed = id
		if !strings.Contains(msg, "no space left on device") {
			t.Fatalf("create on a full disk answered %q, want the disk-full error", msg)
		}
	}
	if failed == "" {
		t.Fatal("the disk never filled up")
	}
	// Space comes back: the daemon keeps working without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if msg := d.CreateNetwork(itest.Net{ID: failed, Opts: map[string]string{"parent": "vp0"}, V4: []string{subnet30(len(ok))}}); msg != "" {
		t.Fatalf("create after space came back: %s", msg)
	}
	s := d.CheckConsistent()
	if len(s.Networks) != len(ok)+1 {
		t.Fatalf("%d networks stored, want %d", len(s.Networks), len(ok)+1)
	}
	for _, id := range append(ok, failed) {
		if _, found := s.Networks[id]; !found {
			t.Fatalf("network %s lost", id[:12])
		}
	}
	t.Logf("disk filled after %d networks; the failed commit left nothing and was retried", len(ok))
}

// TestNoTCPListener: the daemon listens on its unix socket only.
func TestNoTCPListener(t *testing.T) {
	t.Parallel()
	_, d := setup(t, itest.DaemonOptions{})
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", d.Pid(), proto))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 1 {
			t.Fatalf("sockets in the daemon's namespace (%s):\n%s", proto, data)
		}
	}
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v: want 0660 (root only)", fi.Mode())
	}
}
