package driver

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/nltest"
)

// unplumbed is the fake kernel with containers' namespaces in which the
// endpoint's interface never comes up (a container that stopped at once,
// or whose namespace this daemon cannot see): each read counts.
type unplumbed struct {
	*nltest.Kernel
	reads atomic.Int64
}

func (u *unplumbed) SandboxInterface(context.Context, string, string, netip.Addr) (netlinkutil.SandboxID, netlinkutil.SandboxLink, error) {
	u.reads.Add(1)
	return netlinkutil.SandboxID{}, netlinkutil.SandboxLink{}, netlinkutil.ErrSandboxGone
}

func (u *unplumbed) Replumb(context.Context, netlinkutil.Replumb) error { return nil }

// TestLeaveEndsTheInterfaceRead: a Join starts reading the endpoint's
// interface in its container (the container-side repair's part), which
// polls until the interface is up or readWait (10 s) ends. Leave and
// DeleteEndpoint end that read at once: an endpoint that is gone leaves
// nothing polling its container's namespace (a container that stops at
// once left a read polling for 10 s; the endpoint cycle's benchmark left
// thousands).
func TestLeaveEndsTheInterfaceRead(t *testing.T) {
	f := newFixture(t)
	u := &unplumbed{Kernel: f.k}
	f.close()
	f.links = u
	f.open()
	ctx := context.Background()
	f.mustCreate(netReq{ID: netA, Opts: map[string]string{"parent": "eth0"}})
	polling := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for n := u.reads.Load(); u.reads.Load() < n+2; time.Sleep(readEvery / 5) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the interface is not being read (%d reads)", what, u.reads.Load())
			}
		}
		if got := f.d.reads.Running(); got != 1 {
			t.Fatalf("%s: %d reads running, want 1", what, got)
		}
	}
	ended := func(what string) {
		t.Helper()
		n := u.reads.Load()
		time.Sleep(3 * readEvery)
		if got := u.reads.Load(); got > n+1 { // one under way may finish
			t.Fatalf("%s: the interface was read %d more times after it", what, got-n)
		}
	}

	f.mustEndpoint(netA, epA, "198.18.1.10/24") // created and joined
	polling("after Join")
	if err := f.d.Leave(ctx, &network.LeaveRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	ended("after Leave")

	// Joined again: read again; DeleteEndpoint without a Leave (dockerd's
	// cleanup after a failure) ends it too.
	if _, err := f.join(netA, epA); err != nil {
		t.Fatal(err)
	}
	polling("after the second Join")
	if err := f.d.DeleteEndpoint(ctx, &network.DeleteEndpointRequest{NetworkID: netA, EndpointID: epA}); err != nil {
		t.Fatal(err)
	}
	ended("after DeleteEndpoint")

	// Close ends a read under way and waits for it.
	f.mustEndpoint(netA, epB, "198.18.1.11/24")
	polling("after epB's Join")
	f.close()
	n := u.reads.Load()
	time.Sleep(3 * readEvery)
	if got := u.reads.Load(); got != n {
		t.Fatalf("read %d more times after Close", got-n)
	}
}
