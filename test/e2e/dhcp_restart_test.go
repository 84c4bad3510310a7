//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/itest"
)

// The DHCP network of TestDHCPRestart and the fixed MAC of its container
// with --restart always.
const (
	dhcpRestartNet = "n9r"
	dhcpFixedMAC   = "02:42:c6:12:b4:0a"
)

// dhcpView is a container on the DHCP network as docker inspect shows it.
type dhcpView struct {
	addr          netip.Addr
	mac, endpoint string
	pid           int
}

func (e *env) dhcpView(t *testing.T, name string) dhcpView {
	t.Helper()
	var v struct {
		State struct {
			Running bool
			Pid     int
		}
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress, MacAddress, EndpointID string }
		}
	}
	if err := e.jsonOut(&v, "inspect", "-f", "{{json .}}", name); err != nil {
		t.Fatal(err)
	}
	n, ok := v.NetworkSettings.Networks[dhcpRestartNet]
	addr, err := netip.ParseAddr(n.IPAddress)
	if !v.State.Running || !ok || err != nil || !dhcpRange.Contains(addr) || n.EndpointID == "" {
		t.Fatalf("docker inspect %s: running %v, networks %+v: want it running with an address of %s on %s", name, v.State.Running, v.NetworkSettings.Networks, dhcpRange, dhcpRestartNet)
	}
	return dhcpView{addr: addr, mac: n.MacAddress, endpoint: n.EndpointID, pid: v.State.Pid}
}

// leasesOf lists dnsmasq's leases of a MAC.
func leasesOf(d *itest.Dnsmasq, mac string) []itest.DnsmasqLease {
	var out []itest.DnsmasqLease
	for _, l := range d.Leases() {
		if strings.EqualFold(l.MAC, mac) {
			out = append(out, l)
		}
	}
	return out
}

// oneLease waits (leaseWait) until dnsmasq holds exactly one lease for
// v's MAC, of v's address, fails if it does not, and returns it. The
// wait: dnsmasq rewrites its lease file after it answers (truncating it
// first).
func oneLease(t *testing.T, d *itest.Dnsmasq, what string, v dhcpView) itest.DnsmasqLease {
	t.Helper()
	var ls []itest.DnsmasqLease
	itest.WaitFor(leaseWait, func() bool {
		ls = leasesOf(d, v.mac)
		return len(ls) == 1 && ls[0].Addr == v.addr
	})
	if len(ls) != 1 || ls[0].Addr != v.addr {
		t.Fatalf("%s: dnsmasq's leases of %s: %v; want exactly one, of %s (whole file: %v)", what, v.mac, ls, v.addr, d.Leases())
	}
	return ls[0]
}

// leaseEvent is a plugin log line about a lease.
var leaseEvent = regexp.MustCompile(`msg=\\"(leased address|renewed DHCP lease|released DHCP lease)\\" network=\S+ endpoint=([0-9a-f]+) address=([0-9.]+)`)

// leaseEvents lists "what endpoint address" for each lease line of log.
func leaseEvents(log string) []string {
	var out []string
	for _, m := range leaseEvent.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" "+m[2]+" "+m[3])
	}
	return out
}

// hasEvent reports whether events hold what for the endpoint.
func hasEvent(events []string, what, endpoint string) bool {
	for _, ev := range events {
		if strings.HasPrefix(ev, what+" "+endpoint+" ") {
			return true
		}
	}
	return false
}

// dockerdLog is dockerd's log (with the plugin's lines) from offset on;
// logSize is its current size.
func dockerdLog(from int64) string {
	s := readFile(filepath.Join(dataDir, "dockerd.log"))
	if int64(len(s)) < from {
		return s
	}
	return s[from:]
}

func logSize() int64 {
	fi, err := os.Stat(filepath.Join(dataDir, "dockerd.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// setLiveRestore writes the suite engine's daemon.json; it takes effect
// at the engine's next start.
func setLiveRestore(t *testing.T, on bool) {
	t.Helper()
	cfg := "{}\n"
	if on {
		cfg = "{\"live-restore\": true}\n"
	}
	if err := os.WriteFile(filepath.Join(dataDir, "daemon.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// liveRestoreOff, at a test's cleanup, takes the suite's engine back to
// running without live-restore: the next start's configuration, and when
// the engine runs with it (live), a restart (the plugin, which would
// outlive the stop, disabled first and enabled again on the new engine).
func (e *env) liveRestoreOff(t *testing.T, live bool) {
	setLiveRestore(t, false)
	if !live {
		return
	}
	if _, err := e.docker("plugin", "disable", "-f", plugin); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	e.restartDockerd(t)
	if _, err := e.docker("plugin", "enable", plugin); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil && !isZombie(pid) }

// liveRestartDockerd stops the suite's dockerd, which runs with
// live-restore, and starts it again. It fails unless the plugin process
// and the given processes (containers) keep running across it: checked
// while dockerd is down and once it answers again.
func (e *env) liveRestartDockerd(t *testing.T, pids map[string]int) {
	t.Helper()
	start := time.Now()
	plug := pluginPids()
	if len(plug) != 1 {
		t.Fatalf("plugin processes %v, want one", plug)
	}
	pids["the plugin"] = plug[0]
	survive := func(when string) {
		t.Helper()
		for what, pid := range pids {
			if !alive(pid) {
				t.Fatalf("%s: %s (pid %d) is gone; live-restore keeps it running", when, what, pid)
			}
		}
	}
	containerd := containerdPid()
	if err := e.stopDockerd(); err != nil {
		t.Fatal(err)
	}
	if containerd > 0 {
		waitGone(containerd, 60*time.Second)
	}
	survive("with dockerd and its containerd stopped")
	if err := e.startDockerd(); err != nil {
		t.Fatal(err)
	}
	survive("after dockerd started again")
	if p := pluginPids(); len(p) != 1 || p[0] != plug[0] {
		t.Fatalf("plugin processes %v after the restart, before %v: live-restore keeps the plugin", p, plug)
	}
	t.Logf("dockerd (live-restore) restarted in %s; plugin %d and containers %v kept running", time.Since(start).Round(time.Millisecond), plug[0], pids)
}

// renewedAfter waits until dnsmasq's lease of v moves forward beyond was,
// at the latest 15 s after its T1, and returns the new lease.
func renewedAfter(t *testing.T, d *itest.Dnsmasq, name string, v dhcpView, was itest.DnsmasqLease) itest.DnsmasqLease {
	t.Helper()
	deadline := was.Expiry.Add(-dhcpLeaseTime / 2).Add(15 * time.Second)
	var now itest.DnsmasqLease
	within(t, time.Until(deadline), "dnsmasq's expiry of "+name+"'s "+v.addr.String()+" moves forward", func() error {
		ls := leasesOf(d, v.mac)
		if len(ls) != 1 || ls[0].Addr != v.addr || !ls[0].Expiry.After(was.Expiry) {
			return fmt.Errorf("leases of %s: %v, was %q", v.mac, ls, was.Line)
		}
		now = ls[0]
		return nil
	}, func() { t.Logf("dnsmasq's log:\n%s", itest.TailLines(d.Log(), 40)) })
	// dnsmasq's expiry is the time of its ACK plus the lease time.
	leased, renewed := was.Expiry.Add(-dhcpLeaseTime), now.Expiry.Add(-dhcpLeaseTime)
	if after := renewed.Sub(leased); after < dhcpLeaseTime/2-2*time.Second || after > dhcpLeaseTime/2+10*time.Second {
		t.Errorf("%s: renewed %s after the lease, want at T1 (%s)", name, after, dhcpLeaseTime/2)
	}
	return now
}

// TestDHCPRestart: a DHCP lease across dockerd restarts.
//
// Without live-restore (the suite's engine as it runs): dockerd stops the
// containers when it stops, and a container started again is a new
// endpoint. A container with a fixed --mac-address and --restart always
// comes back with the same address: dnsmasq holds exactly one lease for
// the MAC, of that address; the plugin released the old endpoint's lease
// and never renews it again.
//
// With live-restore (daemon.json, for this test only): the plugin and the
// containers keep running while dockerd is down; afterwards each
// container has the same endpoint, MAC and address, reaches the router,
// and the plugin renews its lease at T1, after the restart (dnsmasq's
// expiry moves forward). Then `docker rm -f` releases both leases.
func TestDHCPRestart(t *testing.T) {
	e := need(t)
	start := time.Now()
	e.ensurePlugin(t)
	e.wantNoLeak(t, "before the test")
	// Runs last: back to the suite's engine without live-restore. With
	// live-restore the plugin would outlive dockerd's stop: disabled
	// first, enabled again on the new engine.
	live := false
	t.Cleanup(func() { e.liveRestoreOff(t, live) })
	d := e.makeDHCPLAN(t)
	e.network(t, dhcpRestartNet, "-d", plugin, "--ipam-driver", "null", "-o", "parent="+dhcpParent, "-o", "dhcp=true")

	// (b) Without live-restore.
	e.run(t, ctr{name: "c9m", mac: dhcpFixedMAC}, dhcpRestartNet, "--restart=always")
	e.waitRunning(t, 30*time.Second, "c9m")
	m0 := e.dhcpView(t, "c9m")
	if m0.mac != dhcpFixedMAC {
		t.Fatalf("c9m has MAC %s, want %s", m0.mac, dhcpFixedMAC)
	}
	l := oneLease(t, d, "c9m started", m0)
	t.Logf("c9m: %s MAC %s endpoint %s; dnsmasq: %s", m0.addr, m0.mac, dockerid.Short(m0.endpoint), l.Line)
	// restarted checks that c9m came back after a restart without
	// live-restore as a new endpoint with the same address and one
	// lease, and that the old endpoint's lease was released.
	restarted := func(phase string, old dhcpView, from int64) dhcpView {
		t.Helper()
		e.waitRunning(t, 90*time.Second, "c9m")
		v := e.dhcpView(t, "c9m")
		if v.addr != old.addr || v.mac != dhcpFixedMAC {
			t.Errorf("%s: c9m has %s MAC %s, before %s MAC %s: want the same address", phase, v.addr, v.mac, old.addr, old.mac)
		}
		if v.endpoint == old.endpoint {
			t.Errorf("%s: c9m kept endpoint %s; without live-restore dockerd stops the container and starts it as a new endpoint", phase, dockerid.Short(v.endpoint))
		}
		l := oneLease(t, d, phase, v)
		// The plugin's lines reach dockerd's log through the engine's
		// relay, behind the exchanges they report.
		var evs []string
		if !itest.WaitFor(pluginLogWait, func() bool {
			evs = leaseEvents(dockerdLog(from))
			return hasEvent(evs, "released DHCP lease", old.endpoint) && hasEvent(evs, "leased address", v.endpoint)
		}) {
			t.Errorf("%s: the plugin's lease log since the restart:\n%s\nwant the old endpoint %s released and the new one %s leased", phase, strings.Join(evs, "\n"), dockerid.Short(old.endpoint), dockerid.Short(v.endpoint))
		}
		t.Logf("%s: c9m is back as endpoint %s with %s; dnsmasq: %s; plugin: %s", phase, dockerid.Short(v.endpoint), v.addr, l.Line, strings.Join(evs, "; "))
		return v
	}
	from := logSize()
	e.restartDockerd(t)
	m1 := restarted("after a dockerd restart", m0, from)
	if !itest.WaitFor(leaseWait, func() bool {
		return strings.Contains(d.Log(), "DHCPRELEASE("+dhcpSrvLink+") "+m0.addr.String()+" "+dhcpFixedMAC)
	}) {
		t.Errorf("dnsmasq logged no DHCPRELEASE of %s from %s:\n%s", m0.addr, dhcpFixedMAC, itest.TailLines(d.Log(), 30))
	}

	// (a) With live-restore: turned on by a restart (still one without
	// it: c9m comes back as (b) says), then dockerd restarted under the
	// running containers.
	setLiveRestore(t, true)
	from = logSize()
	e.restartDockerd(t)
	live = true
	m2 := restarted("after the restart that turned live-restore on", m1, from)
	e.run(t, ctr{name: "c9l"}, dhcpRestartNet)
	e.waitRunning(t, 30*time.Second, "c9l")
	l0 := e.dhcpView(t, "c9l")
	cs := []struct {
		name string
		v    dhcpView
		l    itest.DnsmasqLease
	}{{"c9m", m2, oneLease(t, d, "c9m", m2)}, {"c9l", l0, oneLease(t, d, "c9l started", l0)}}
	from = logSize()
	e.liveRestartDockerd(t, map[string]int{"c9m": m2.pid, "c9l": l0.pid})
	restartedAt := time.Now()
	for _, c := range cs {
		v := e.dhcpView(t, c.name)
		if v != c.v {
			t.Errorf("after the live-restore restart %s is %+v, before %+v: want the same endpoint, MAC, address and process", c.name, v, c.v)
		}
		if out, err := e.exec(c.name, "ip", "-4", "addr", "show", "eth0"); err != nil || !strings.Contains(out, "inet "+v.addr.String()+"/24") {
			t.Errorf("%s's eth0 after the restart: %v\n%s\nwant %s/24", c.name, err, out, v.addr)
		}
		oneLease(t, d, c.name+" after the live-restore restart", v)
		e.ping(t, c.name, dhcpRouter)
		t.Logf("%s: %s MAC %s endpoint %s kept across the restart; dnsmasq: %s", c.name, v.addr, v.mac, dockerid.Short(v.endpoint), c.l.Line)
	}
	for _, c := range cs {
		now := renewedAfter(t, d, c.name, c.v, c.l)
		t.Logf("%s: renewed %s after the live-restore restart (leased %s before it): %s", c.name,
			now.Expiry.Add(-dhcpLeaseTime).Sub(restartedAt).Round(time.Second), restartedAt.Sub(c.l.Expiry.Add(-dhcpLeaseTime)).Round(time.Second), now.Line)
	}
	// dnsmasq's lease file moves at its ACK; the plugin's line follows
	// once it has the ACK and reaches dockerd's log through the engine's
	// relay of the plugin's output (seen a moment behind on the current
	// engine): give it a moment.
	within(t, 10*time.Second, "the plugin logs the renewal of every container's lease", func() error {
		evs := leaseEvents(dockerdLog(from))
		for _, c := range cs {
			if !hasEvent(evs, "renewed DHCP lease", c.v.endpoint) {
				return fmt.Errorf("the plugin logged no renewal of %s's endpoint %s after the restart:\n%s", c.name, dockerid.Short(c.v.endpoint), strings.Join(evs, "\n"))
			}
		}
		return nil
	}, func() {})
	// The endpoints c9m had before are gone from the plugin's state: none
	// of their leases (due at their T1 by now) is renewed.
	for _, old := range []dhcpView{m0, m1} {
		if hasEvent(leaseEvents(e.logSinceMark()), "renewed DHCP lease", old.endpoint) {
			t.Errorf("the plugin renewed the lease of c9m's old endpoint %s: a second lease for %s", dockerid.Short(old.endpoint), dhcpFixedMAC)
		}
	}
	for _, bad := range []string{"could not renew", "could not release", "DHCP lease expired", "refused to renew", "offers another address"} {
		if strings.Contains(e.logSinceMark(), bad) {
			t.Errorf("the plugin logged %q:\n%s", bad, itest.TailLines(e.logSinceMark(), 40))
		}
	}

	e.must(t, "rm", "-f", "c9m", "c9l")
	eventually(t, 15*time.Second, "both leases leave dnsmasq's lease file", func() error {
		if ls := d.Leases(); len(ls) > 0 {
			return fmt.Errorf("lease file still has %v", ls)
		}
		return nil
	})
	e.removeNetwork(t, dhcpRestartNet)
	d.Stop()
	if err := teardownDHCPLAN(); err != nil {
		t.Fatal(err)
	}
	e.wantNoLeak(t, "after the test")
	t.Logf("TestDHCPRestart took %s before cleanup", time.Since(start).Round(100*time.Millisecond))
}
