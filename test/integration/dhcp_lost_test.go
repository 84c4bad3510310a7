package integration

import (
	"context"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/netlinkutil"
)

// A lease the server refuses at its renewal (DHCPNAK), through the real
// binary: the address is blocked on the parent at once, the container (its
// link moved into a namespace of its own) no longer reaches the server
// from it, only that address is asked for again, and once the server
// gives it back the block goes and the container works again. A renewal
// to a server that ignores REQUESTs holds up no deletion.
func TestDHCPLostLeaseThroughTheBinary(t *testing.T) {
	// Serial: deletions are bounded (2 s) and blocks awaited by T1 plus slack (its subtests run in parallel among themselves).
	itest.RequireRoot(t)
	t.Run("refused at renewal, then given back", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease})
		e.createNetwork(t, netA)
		addr, _, lease := e.createEndpoint(t, netA, epA)
		sb := itest.NewNetns(t)
		itest.JoinSandbox(e.ns, sb, e.join(t, netA, epA), addr.String())
		srv := dhcpServer.Addr().String()
		if err := itest.Ping(sb, addr.Addr().String(), srv, 5*time.Second); err != nil {
			t.Fatalf("before the NAK: %v", err)
		}
		k := netlinkutil.NewAt(e.ns.Handle())
		mark := instanceMark(t, e.d)
		blocked := func() bool {
			b, err := k.BlockedAddrs(context.Background(), mark)
			return err == nil && len(b) == 1 && b[0].Addr == addr.Addr() && b[0].Parent == "lan0"
		}
		e.srv.Set(func(c *itest.DHCPConfig) { c.NAKAll = true })
		if !itest.WaitFor(time.Until(lease.Granted.Add(dhcpT1+dhcpSlack)), blocked) {
			t.Fatalf("the refused lease's address is not blocked on lan0 after T1:\n%s", tailLog(e.d.Log(), 20))
		}
		if err := itest.Ping(sb, addr.Addr().String(), srv, 2*time.Second); err == nil {
			t.Fatal("the container reaches the LAN from the address it lost")
		}
		if !e.d.WaitLog(5*time.Second, "DHCP lease lost") { // logged after the block is made
			t.Errorf("no lost-lease line:\n%s", tailLog(e.d.Log(), 20))
		}
		// Only the lost address is asked for: no REQUEST for another one.
		for _, m := range e.srv.Messages(itest.From(lease.MAC, nil)) {
			if m.Requested.IsValid() && m.Requested != addr.Addr() {
				t.Fatalf("the daemon asked for %s after losing %s:\n%s", m.Requested, addr, e.srv.MessagesString())
			}
		}
		e.srv.Set(func(c *itest.DHCPConfig) { c.NAKAll = false })
		// Won back at the next ask (every 30 s); two are awaited, as in
		// TestVMOwnedVLANRenamedWhileLeaseLost.
		if !itest.WaitFor(2*30*time.Second+20*time.Second, func() bool { return !blocked() }) {
			t.Fatalf("the block stays after the server gives the address back:\n%s", tailLog(e.d.Log(), 20))
		}
		if err := itest.Ping(sb, addr.Addr().String(), srv, 5*time.Second); err != nil {
			t.Fatalf("after the win back: %v", err)
		}
		if l, ok := e.srv.Lease(addr.Addr()); !ok || l.MAC.String() != lease.MAC.String() {
			t.Fatalf("the server's lease of %s: %+v, want it held by %s again", addr, l, lease.MAC)
		}
		e.d.RemoveEndpoint(netA, epA)
		e.d.DeleteNetwork(netA)
	})
	t.Run("deletion during a renewal a server ignores", func(t *testing.T) {
		t.Parallel()
		e := dhcpSetup(t, &itest.DHCPConfig{LeaseTime: dhcpLease})
		e.d.MustCall("CreateNetwork", itest.DHCPNetwork(netA, "lan0", "dhcp_timeout=20s"), nil)
		_, _, lease := e.createEndpoint(t, netA, epA)
		e.srv.Set(func(c *itest.DHCPConfig) { c.IgnoreRequests = true })
		time.Sleep(time.Until(lease.Granted.Add(dhcpT1 + time.Second))) // the renewal waits on the server
		// Waiting for the renewal would take its dhcp_timeout (20 s).
		within := 2 * time.Second
		if itest.InVM() { // an emulated CPU shared with the other suites
			within = 10 * time.Second
		}
		start := time.Now()
		e.d.RemoveEndpoint(netA, epA)
		if took := time.Since(start); took > within {
			t.Fatalf("Leave and DeleteEndpoint took %s behind a renewal", took)
		}
		start = time.Now()
		e.d.DeleteNetwork(netA)
		if took := time.Since(start); took > within {
			t.Fatalf("DeleteNetwork took %s", took)
		}
	})
}
