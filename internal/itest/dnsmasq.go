package itest

// dnsmasq as a test LAN's DHCP server (Debian's dnsmasq-base), for tests
// that need a real one: the Docker end-to-end suite runs it in a named
// namespace on the far end of a veth whose near end is the plugin's
// parent.

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// DnsmasqPath is where Debian's dnsmasq-base installs dnsmasq.
const DnsmasqPath = "/usr/sbin/dnsmasq"

// DnsmasqBinary returns dnsmasq, installing Debian's dnsmasq-base (as
// test/deps.sh does) when it is missing and the test runs as root; else
// it skips, and fails in CI.
func DnsmasqBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p
	}
	if _, err := os.Stat(DnsmasqPath); err == nil {
		return DnsmasqPath
	}
	RequireRoot(t)
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "install", "-y", "-q", "--no-install-recommends", "dnsmasq-base")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	out, err := install()
	if err != nil {
		if up, uerr := exec.Command("apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			out = append(out, up...)
		}
		out, err = install()
	}
	if _, serr := os.Stat(DnsmasqPath); err != nil || serr != nil {
		msg := fmt.Sprintf("dnsmasq is missing and `apt-get install dnsmasq-base` failed (%v): install it (test/deps.sh does as root)\n%s", err, out)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return DnsmasqPath
}

// DnsmasqConfig says where and how dnsmasq serves DHCP.
type DnsmasqConfig struct {
	// Netns is the path of the network namespace it runs in
	// (/run/netns/NAME); NS, if set, is used instead.
	Netns string
	NS    *Netns
	// Interface is the link it serves, in that namespace.
	Interface string
	// Dir holds the lease file, the log and the pid file.
	Dir string
	// Range is --dhcp-range, e.g. "198.18.180.100,198.18.180.150,255.255.255.0,2m"
	// (two minutes is dnsmasq's shortest lease).
	Range string
	// Options are --dhcp-option values, e.g. "3,198.18.180.1".
	Options []string
	// Extra are more arguments, e.g. "--no-ping".
	Extra []string
	// DNS serves DNS on port 53 too (the LAN's names: its leases' host
	// names); off when false.
	DNS bool
	// Ready is the log line that says it serves ("DHCP, IP range" when
	// empty; "DHCPv6, IP range" for a DHCPv6 range).
	Ready string
}

// Dnsmasq is a running dnsmasq.
type Dnsmasq struct {
	t                           testing.TB
	cmd                         *exec.Cmd
	exited                      chan struct{}
	out                         *strings.Builder
	LeaseFile, LogFile, PidFile string
}

// StartDnsmasq starts dnsmasq in the foreground (as root, without a
// configuration file, DNS off) and waits until it serves the range; it
// is killed at cleanup, and its output and log are logged if the test
// failed.
func StartDnsmasq(t testing.TB, c DnsmasqConfig) *Dnsmasq {
	t.Helper()
	bin := DnsmasqBinary(t)
	d := &Dnsmasq{t: t, LeaseFile: filepath.Join(c.Dir, "leases"), LogFile: filepath.Join(c.Dir, "log"),
		PidFile: filepath.Join(c.Dir, "pid"), out: &strings.Builder{}}
	netns := c.Netns
	if c.NS != nil {
		netns = "/proc/self/fd/3"
	}
	port := "--port=0"
	if c.DNS {
		port = "--port=53"
	}
	args := []string{"--net=" + netns, "--", bin, "--keep-in-foreground", "--conf-file=/dev/null", port,
		"--interface=" + c.Interface, "--bind-interfaces", "--dhcp-range=" + c.Range,
		"--dhcp-leasefile=" + d.LeaseFile, "--dhcp-authoritative", "--log-dhcp", "--log-facility=" + d.LogFile,
		"--pid-file=" + d.PidFile, "--user=root"}
	for _, o := range c.Options {
		args = append(args, "--dhcp-option="+o)
	}
	d.cmd = exec.Command("nsenter", append(args, c.Extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if c.NS != nil {
		f := c.NS.File()
		defer f.Close()
		d.cmd.ExtraFiles = []*os.File{f}
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start dnsmasq: %v", err)
	}
	d.exited = make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("dnsmasq output:\n%s\ndnsmasq log:\n%s\nlease file:\n%s", d.out, d.Log(), read(d.LeaseFile))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	ready := c.Ready
	if ready == "" {
		ready = "DHCP, IP range"
	}
	for !strings.Contains(d.Log(), ready) {
		select {
		case <-d.exited:
			t.Fatalf("dnsmasq exited: %s\n%s\n%s", d.cmd.ProcessState, d.out, d.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq did not start within 10s:\n%s\n%s", d.out, d.Log())
		}
	}
	return d
}

// Stop kills dnsmasq and waits for it.
func (d *Dnsmasq) Stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// Pid is dnsmasq's process ID.
func (d *Dnsmasq) Pid() int { return d.cmd.Process.Pid }

// Log returns dnsmasq's log so far.
func (d *Dnsmasq) Log() string { return read(d.LogFile) }

func read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// DnsmasqLease is one line of dnsmasq's lease file.
type DnsmasqLease struct {
	Expiry   time.Time
	MAC      string
	Addr     netip.Addr
	Hostname string // "*" for none
	ClientID string // "*" for none, else hex bytes joined by colons
	Line     string
}

// Leases returns the lease file's lines, by address.
func (d *Dnsmasq) Leases() []DnsmasqLease {
	var out []DnsmasqLease
	for _, line := range strings.Split(read(d.LeaseFile), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		exp, err1 := strconv.ParseInt(f[0], 10, 64)
		addr, err2 := netip.ParseAddr(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, DnsmasqLease{Expiry: time.Unix(exp, 0), MAC: f[1], Addr: addr, Hostname: f[3], ClientID: f[4], Line: line})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out
}

// Lease returns the lease file's line for addr.
func (d *Dnsmasq) Lease(addr netip.Addr) (DnsmasqLease, bool) {
	for _, l := range d.Leases() {
		if l.Addr == addr {
			return l, true
		}
	}
	return DnsmasqLease{}, false
}

// WaitLease waits up to timeout until the lease file has a line for addr
// that ok accepts (any line when ok is nil), and returns it. dnsmasq
// answers a client first and rewrites its lease file afterwards,
// truncating it first: a read right after the reply may see the old
// file or an empty one. When no line is accepted in time it returns the
// last line read for addr (the zero line when there was none) and false.
func (d *Dnsmasq) WaitLease(timeout time.Duration, addr netip.Addr, ok func(DnsmasqLease) bool) (DnsmasqLease, bool) {
	return waitLine(timeout, func() (DnsmasqLease, bool) { return d.Lease(addr) }, ok)
}

// waitLine waits up to timeout until read finds a line that ok accepts
// (any line when ok is nil), and returns it; when none is accepted in time,
// the last line read (the zero line when there was none) and false.
func waitLine[L any](timeout time.Duration, read func() (L, bool), ok func(L) bool) (L, bool) {
	var l L
	held := WaitFor(timeout, func() bool {
		var found bool
		l, found = read()
		return found && (ok == nil || ok(l))
	})
	return l, held
}

// Released counts the DHCPRELEASEs of addr from mac in dnsmasq's log.
func (d *Dnsmasq) Released(addr netip.Addr, mac string) int {
	tail := ") " + addr.String() + " " + mac
	n := 0
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, "DHCPRELEASE(") && strings.Contains(line, tail) {
			n++
		}
	}
	return n
}

// WaitReleased waits up to timeout until dnsmasq logged more than before
// DHCPRELEASEs of addr from mac (Released) and its lease file holds no
// lease of addr (the log first: the file alone can read empty while
// dnsmasq rewrites it); it says what it last saw when they did not.
func (d *Dnsmasq) WaitReleased(timeout time.Duration, addr netip.Addr, mac string, before int) error {
	var lease DnsmasqLease
	var held bool
	var n int
	if WaitFor(timeout, func() bool {
		n = d.Released(addr, mac)
		lease, held = d.Lease(addr)
		return n > before && !held
	}) {
		return nil
	}
	return fmt.Errorf("after %s: %d DHCPRELEASEs of %s from %s logged (want more than %d); lease file line %q", timeout, n, addr, mac, before, lease.Line)
}
