//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestDHCPLostLease: a container whose lease is lost (the LAN's server
// went away and the lease expired) stops reaching the LAN from that
// address (the plugin blocks it on the parent), `underlay doctor` names
// the lost lease, and once the server is back and gives the address back
// the container works again, with the same address.
func TestDHCPLostLease(t *testing.T) {
	e := need(t)
	start := time.Now()
	e.ensurePlugin(t)
	e.wantNoLeak(t, "before the test")
	d := e.makeDHCPLAN(t)
	e.network(t, "n9l", "-d", plugin, "--ipam-driver", "null", "-o", "parent="+dhcpParent, "-o", "dhcp=true", "-o", "dhcp_timeout=3s")
	e.run(t, ctr{name: "c9l"}, "n9l")
	e.waitRunning(t, 30*time.Second, "c9l")
	var ip string
	if err := e.jsonOut(&ip, "inspect", "-f", `{{json (index .NetworkSettings.Networks "n9l").IPAddress}}`, "c9l"); err != nil {
		t.Fatal(err)
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil || !dhcpRange.Contains(addr) {
		t.Fatalf("c9l has address %q, want one of %s", ip, dhcpRange)
	}
	lease, ok := d.WaitLease(leaseWait, addr, func(itest.DnsmasqLease) bool { return true })
	if !ok {
		t.Fatalf("dnsmasq has no lease of %s", addr)
	}
	e.ping(t, "c9l", dhcpRouter)

	// The server goes away: the renewals fail, the lease expires.
	d.Stop()
	t.Logf("dnsmasq stopped; the lease of %s expires at %s", addr, lease.Expiry.Format(time.TimeOnly))
	within(t, time.Until(lease.Expiry)+30*time.Second, "c9l stops reaching the router once its lease is lost", func() error {
		if e.reaches("c9l", dhcpRouter, 2*time.Second) {
			return fmt.Errorf("c9l still reaches %s from %s", dhcpRouter, addr)
		}
		return nil
	}, func() { t.Logf("plugin log:\n%s", itest.TailLines(e.logSinceMark(), 30)) })
	// The plugin logs the loss once the address is blocked; the line
	// reaches dockerd's log through the engine's relay, behind the block.
	if log, ok := e.waitLogSinceMark(func(log string) bool { return strings.Contains(log, "DHCP lease lost") }); !ok {
		t.Errorf("the plugin did not log the lost lease:\n%s", itest.TailLines(log, 30))
	}
	out, code := e.doctor(t)
	if code == 0 || !strings.Contains(out, "lost-lease") || !strings.Contains(out, addr.String()) {
		t.Fatalf("underlay doctor exited %d and said:\n%s\nwant the lost-lease finding naming %s", code, out, addr)
	}

	// The server is back and gives the address back: the container works
	// again, with the same address, within the plugin's 30 s retry.
	d = itest.StartDnsmasq(t, dhcpServer())
	within(t, 75*time.Second, "c9l reaches the router again", func() error {
		if !e.reaches("c9l", dhcpRouter, 2*time.Second) {
			return fmt.Errorf("c9l does not reach %s", dhcpRouter)
		}
		return nil
	}, func() {
		t.Logf("plugin log:\n%s\ndnsmasq log:\n%s", itest.TailLines(e.logSinceMark(), 30), itest.TailLines(d.Log(), 20))
	})
	if l, ok := d.WaitLease(leaseWait, addr, func(l itest.DnsmasqLease) bool { return l.MAC == lease.MAC }); !ok || l.MAC != lease.MAC {
		t.Errorf("after the win back dnsmasq's lease of %s is %q, want it leased to %s again", addr, l.Line, lease.MAC)
	}
	if out, code := e.doctor(t); strings.Contains(out, "lost-lease") {
		t.Errorf("doctor still reports a lost lease (exit %d):\n%s", code, out)
	}
	e.must(t, "rm", "-f", "c9l")
	e.removeNetwork(t, "n9l")
	d.Stop()
	if err := teardownDHCPLAN(); err != nil {
		t.Fatal(err)
	}
	e.wantNoLeak(t, "after the test")
	t.Logf("TestDHCPLostLease took %s", time.Since(start).Round(100*time.Millisecond))
}

// doctor runs `underlay doctor --json` against the managed plugin's socket
// and the suite's engine: its findings as text, and its exit code.
func (e *env) doctor(t *testing.T) (string, int) {
	t.Helper()
	sock := filepath.Join("/run/docker/plugins", e.pluginID(t), "underlay.sock")
	cmd := exec.Command(itest.Binary(t), "doctor", "--socket", sock, "--docker-host", "unix://"+sockPath, "--json")
	raw, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("underlay doctor: %v", err)
	}
	var report struct {
		Findings []struct{ Kind, Subject, Message string }
	}
	if err := json.Unmarshal(raw, &report); err != nil {
		t.Fatalf("underlay doctor --json: %v:\n%s", err, raw)
	}
	var b strings.Builder
	for _, f := range report.Findings {
		fmt.Fprintf(&b, "%s %s: %s\n", f.Kind, f.Subject, f.Message)
	}
	return b.String(), code
}
