package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/vishvananda/netlink"
)

func TestKill9AndRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	a := itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}}
	d.MustCreateNetwork(a)
	ce, _ := d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	var ceB network.CreateEndpointResponse
	d.MustCall("CreateEndpoint", network.CreateEndpointRequest{NetworkID: netA, EndpointID: epB, Interface: &network.EndpointInterface{Address: "198.18.1.11/24"}}, &ceB)

	d.Restart() // SIGKILL, then start again
	ns.WantLinks(with(linkA)...)
	if msg := d.CreateNetwork(a); msg != "" {
		t.Fatalf("same-ID CreateNetwork after kill -9 answered %q", msg)
	}
	// The endpoint joined before: its link is known and DeleteEndpoint removes it.
	d.RemoveEndpoint(netA, epA)
	ns.WantLinks(base...)
	// The endpoint created but not joined before: Join works with its MAC.
	var j network.JoinResponse
	d.MustCall("Join", network.JoinRequest{NetworkID: netA, EndpointID: epB}, &j)
	if got := ns.MustLink(linkB).Attrs().HardwareAddr.String(); got != ceB.Interface.MacAddress {
		t.Fatalf("MAC after restart %s, want %s", got, ceB.Interface.MacAddress)
	}
	_ = ce
	d.RemoveEndpoint(netA, epB)
	d.DeleteNetwork(netA)
	ns.WantLinks(base...)
	wantRecords(t, d, 0)
}

func TestStrayLinksRemovedBeforeServing(t *testing.T) {
	t.Parallel()
	ns, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	d.Kill()
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mark := kernel.Mark(db.InstanceID())
	db.Close()
	if db.InstanceID() == "" {
		t.Fatal("the state file has no instance ID")
	}
	if got := ns.MustLink(linkA).Attrs().Alias; got != mark {
		t.Fatalf("endpoint link %s carries alias %q, want underlay's mark %q", linkA, got, mark)
	}
	// Links no record owns: one with this state file's mark (a crash
	// between the kernel and the store), one of underlay's name form
	// without a mark, one with another instance's mark, and an
	// administrator's macvlan. Only the first is underlay's to delete.
	const (
		marked      = "ule0123456789ab"
		unmarked    = "ule0123456789ac"
		otherMarked = "ule0123456789ad"
	)
	parent := ns.MustLink("vp0").Attrs().Index
	for name, alias := range map[string]string{marked: mark, unmarked: "", otherMarked: kernel.Mark("0123456789abcdef"), "mine0": ""} {
		l := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: parent}, Mode: netlink.MACVLAN_MODE_BRIDGE}
		if err := ns.NL.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
		if alias != "" {
			if err := ns.NL.LinkSetAlias(ns.MustLink(name), alias); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.StartNoWait(); err != nil {
		t.Fatal(err)
	}
	// From the first moment the socket answers, the marked stray is gone.
	if err := d.WaitReady(itest.ReadyWait()); err != nil {
		t.Fatal(err)
	}
	ns.WantLinks(with(linkA, unmarked, otherMarked, "mine0")...)
	if got := ns.MustLink(otherMarked).Attrs().Alias; got != kernel.Mark("0123456789abcdef") {
		t.Fatalf("the other instance's link carries %q after the start", got)
	}
	// The endpoint survived with its record: it leaves and is deleted.
	d.RemoveEndpoint(netA, epA)
	ns.WantLinks(with(unmarked, otherMarked, "mine0")...)
}

func TestSecondInstanceOnSameStateExits(t *testing.T) {
	// Serial: it bounds the second instance's exit (5 s).
	ns, d := setup(t, itest.DaemonOptions{})
	other := filepath.Join(t.TempDir(), "other.sock")
	cmd := d.Command(nil, "serve", "--socket", other, "--state", d.State)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("second instance exited 0")
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("second instance still running after 10s")
	}
	if !strings.Contains(out.String(), d.State) || time.Since(start) > 5*time.Second {
		t.Fatalf("second instance took %s and said %q: want a quick exit naming %s", time.Since(start), out.String(), d.State)
	}
	if _, err := os.Stat(other); err == nil {
		t.Fatal("second instance created its socket")
	}
	// The first one still serves.
	d.MustCall("GetCapabilities", nil, nil)
	_ = ns
}

func TestSIGTERMFinishesInFlightRemovesSocketAndClosesState(t *testing.T) {
	// Serial: SIGTERM must land within the 800 ms a request is held in flight.
	docker := itest.NewFakeDocker(t)
	_, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	// A conflicting create waits on a slow Docker while SIGTERM arrives.
	docker.SetLive(netA)
	docker.SetDelay(800 * time.Millisecond)
	answer := make(chan string, 1)
	go func() {
		code, body, err := d.Post("/NetworkDriver.CreateNetwork", itest.Net{ID: netB, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}.Request())
		answer <- fmt.Sprint(code, " ", string(body), " ", err)
	}()
	for docker.Calls() == 0 && !strings.Contains(d.Log(), "create network decision") {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; !strings.Contains(got, "already used by network aaaaaaaaaaaa") {
		t.Fatalf("in-flight request answered %q, want its real answer", got)
	}
	if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket still there after SIGTERM: %v", err)
	}
	if !strings.Contains(d.Log(), "finishing in-flight requests") {
		t.Fatal("shutdown not logged")
	}
	d.Start() // the state file was closed and is usable again
	if msg := d.CreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}}); msg != "" {
		t.Fatal(msg)
	}
}

func TestEnvironmentAndVersion(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "from-env", "state.db")
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Dir: dir, Env: []string{"LOG_LEVEL=warn"}})
	if strings.Contains(d.Log(), "level=INFO") == false {
		// --log-level debug is passed by the kit, and flags win over LOG_LEVEL.
		t.Fatal("flag --log-level debug did not win over LOG_LEVEL=warn")
	}
	d.Kill()
	cmd := d.Command([]string{"STATE=" + state}, "serve", "--socket", filepath.Join(dir, "env.sock"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("STATE from the environment was not used (directories created)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, err := d.Command(nil, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "underlay ") {
		t.Fatalf("underlay version: %q %v", out, err)
	}
	bad, err := d.Command(nil, "serve", "--scope", "galaxy").CombinedOutput()
	if err == nil || !strings.Contains(string(bad), "galaxy") {
		t.Fatalf("--scope galaxy: %q %v", bad, err)
	}
}
