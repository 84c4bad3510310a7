// Package integration runs the real underlay binary inside fresh network
// namespaces, drives its socket with the remote driver protocol and checks
// the kernel's links with netlink. Files tagged vm need ipvlan, 8021q and
// dummy and run in the project's test VM (test/vm/run.sh).
//
// A test that can run beside the others calls t.Parallel() first: it has
// namespaces, a daemon and a temporary directory of its own, and most of
// its time is waiting. A test whose assertions are timing bounds (or need
// a request to fall within a window: a reservation, a grace period, a
// probe's budget), a load test, or one not known to be safe beside others
// stays serial and says why in its first line: go test runs every serial
// top-level test, alone, before the parallel ones start.
package integration

import (
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestMain checks, after every test, that nothing is left in the VM
// (vm_leftovers_test.go; nothing outside the VM).
func TestMain(m *testing.M) { itest.Main(m, nothingLeftInTheVM) }

// IDs as Docker makes them: 64 hexadecimal characters.
const (
	netA = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001"
	netB = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000002"
	netC = "cccccccccccc0000000000000000000000000000000000000000000000000003"
	epA  = "eaeaeaeaeaea0000000000000000000000000000000000000000000000000001"
	epB  = "ebebebebebeb0000000000000000000000000000000000000000000000000002"
	epC  = "ecececececec0000000000000000000000000000000000000000000000000003"
	epE  = "efefefefefef0000000000000000000000000000000000000000000000000005"
)

// linkA, linkB, linkC are the host link names of epA, epB, epC.
const (
	linkA = "uleeaeaeaeaeaea"
	linkB = "uleebebebebebeb"
	linkC = "uleecececececec"
)

// setup returns a namespace with veth parents vp0 (MTU 1500) and vp1
// (MTU 9000) and an underlay serving in it.
func setup(t *testing.T, o itest.DaemonOptions) (*itest.Netns, *itest.Daemon) {
	t.Helper()
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	ns.AddVeth("vp1", "vp1-peer", 9000)
	return ns, itest.StartDaemon(t, ns, o)
}

// base are the links setup makes.
var base = []string{"lo", "vp0", "vp0-peer", "vp1", "vp1-peer"}

func with(names ...string) []string { return append(append([]string{}, base...), names...) }
