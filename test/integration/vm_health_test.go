//go:build vm

package integration

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// An owned VLAN that exists but is broken or renamed, with a container's
// link standing on it (in its sandbox): set down, the daemon sets it up
// again; renamed by an operator (d0.10 -> mine), the record follows it, a
// later Join uses it, and neither a restart nor doctor --repair deletes it
// (the kernel would take the container's interface with it).
func TestVMOwnedVLANDownAndRenamed(t *testing.T) {
	// Serial: repairs are bounded (5 s).
	docker := itest.NewFakeDocker(t)
	ns, d := vmSetup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	a := vmNet(1)
	d.MustCreateNetwork(itest.Net{ID: a, Opts: map[string]string{"parent": "d0.10"}, V4: vmPool4(1)})
	docker.SetLive(a)
	idx := vmWantVLAN(t, ns, "d0.10", "d0", 10)
	sb := itest.NewNetns(t)
	eth := itest.JoinSandbox(ns, sb, vmJoin(d, a, vmEp(1), vmAddr4(1, 10), ""), vmAddr4(1, 10))
	waitUp := func(name string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if l := ns.Link(name); l != nil && l.Attrs().Flags&net.FlagUp != 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is not up again 5 s after an operator set it down:\n%s", name, tailLog(d.Log(), 20))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Set down: the container would have NO-CARRIER; the watcher heals it.
	if err := ns.NL.LinkSetDown(ns.MustLink("d0.10")); err != nil {
		t.Fatal(err)
	}
	waitUp("d0.10")
	if got := vmWantVLAN(t, ns, "d0.10", "d0", 10); got != idx {
		t.Fatalf("d0.10 was re-made (index %d, was %d) where setting it up was enough", got, idx)
	}
	// Renamed (the VM's 6.1 kernel renames only a down link).
	l := ns.MustLink("d0.10")
	if err := ns.NL.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.LinkSetName(l, "mine"); err != nil {
		t.Fatalf("rename d0.10: %v", err)
	}
	waitUp("mine")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(d.Log(), "its record and networks follow it") {
		if time.Now().After(deadline) {
			t.Fatalf("the record did not follow the renamed VLAN:\n%s", tailLog(d.Log(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ns.Link("d0.10") != nil {
		t.Fatal("a second link d0.10 was made beside the renamed VLAN")
	}
	// A later Join stands on the renamed VLAN (it was refused as "made by
	// someone else" before).
	sb2 := itest.NewNetns(t)
	itest.JoinSandbox(ns, sb2, vmJoin(d, a, vmEp(2), vmAddr4(1, 11), ""), vmAddr4(1, 11))
	survives := func(when string) {
		t.Helper()
		if got := vmWantVLAN(t, ns, "mine", "d0", 10); got != idx {
			t.Fatalf("%s: the renamed VLAN is index %d, was %d", when, got, idx)
		}
		if sb.Link(eth) == nil || sb2.Link(eth) == nil {
			t.Fatalf("%s: a container's interface on the renamed VLAN is gone", when)
		}
	}
	survives("after the rename")
	d.Restart()
	survives("after a restart")
	out, errOut, code := cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host(), "--repair")
	if strings.Contains(out, "orphan") {
		t.Fatalf("doctor calls the renamed VLAN an orphan (exit %d):\n%s%s", code, out, errOut)
	}
	survives("after doctor --repair")
	wantRecords(t, d, 2, a)
	// Deleting the network deletes the VLAN under its new name.
	d.RemoveEndpoint(a, vmEp(1))
	d.RemoveEndpoint(a, vmEp(2))
	sb.Delete(eth)
	sb2.Delete(eth)
	d.DeleteNetwork(a)
	ns.WantLinks(vmBase...)
}
