package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/vishvananda/netlink"
)

// dnsmasq runs dnsmasq on srv0 in the server's namespace until cleanup.
type dnsmasq struct {
	leases, log string
}

func (l *lan) dnsmasq() *dnsmasq {
	t := l.t
	bin := itest.DnsmasqBinary(t)
	dir := t.TempDir()
	d := &dnsmasq{leases: filepath.Join(dir, "leases"), log: filepath.Join(dir, "log")}
	pid := filepath.Join(dir, "pid")
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", bin, "--keep-in-foreground", "--port=0",
		"--interface="+lanServer, "--bind-interfaces",
		"--dhcp-range=198.18.180.100,198.18.180.150,255.255.255.0,2m", "--dhcp-option=3,198.18.180.1",
		"--dhcp-option=121,198.18.190.0/24,198.18.180.1", "--dhcp-leasefile="+d.leases, "--dhcp-authoritative",
		"--log-dhcp", "--log-facility="+d.log, "--pid-file="+pid, "--user=root")
	ns := l.far.File()
	cmd.ExtraFiles = []*os.File{ns}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Start()
	ns.Close()
	if err != nil {
		t.Fatalf("start dnsmasq: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || testing.Verbose() {
			log, _ := os.ReadFile(d.log)
			t.Logf("dnsmasq output:\n%s\ndnsmasq log:\n%s", out, log)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.read(d.log), "DHCP, IP range") {
		select {
		case <-exited:
			t.Fatalf("dnsmasq exited: %s\n%s", cmd.ProcessState, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq did not start within 10s:\n%s\n%s", out, d.read(d.log))
		}
	}
	return d
}

func (*dnsmasq) read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// expiry returns the expiry (first column) of addr's line in the lease
// file, 0 when it has none.
func (d *dnsmasq) expiry(addr string) (exp int64, line string) {
	for _, line := range strings.Split(d.read(d.leases), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[2] == addr {
			exp, _ := strconv.ParseInt(f[0], 10, 64)
			return exp, line
		}
	}
	return 0, ""
}

// waitFor polls cond for up to 3 s.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// colons is b as dnsmasq writes a client ID: hex bytes joined by colons.
func colons(b []byte) string {
	s := make([]string, len(b))
	for i, c := range b {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(s, ":")
}

func TestDnsmasq(t *testing.T) {
	l := newLAN(t)
	d := l.dnsmasq()
	c := l.client()
	mv := Request{Parent: lanParent, MAC: mac(1)}
	iv := Request{Parent: lanParent, MAC: l.parentMAC, ClientID: ClientIDFromName("underlay-ep-ipvlan")}
	leases := acquireAll(t, c, []Request{mv, iv})
	for i, r := range []Request{mv, iv} {
		lease := leases[i]
		if lease.Addr.Bits() != 24 || lease.Router.String() != "198.18.180.1" || lease.LeaseTime != 2*time.Minute ||
			len(lease.Routes) != 1 || lease.Routes[0].Dst.String() != "198.18.190.0/24" || lease.Routes[0].Gateway.String() != "198.18.180.1" {
			t.Errorf("lease for %s from dnsmasq: %+v", r.who(), lease)
		}
		var line string
		waitFor(func() bool { _, line = d.expiry(lease.Addr.Addr().String()); return line != "" })
		if !strings.Contains(line, r.MAC.String()) || (r.ClientID != nil && !strings.Contains(line, colons(r.ClientID))) {
			t.Errorf("lease file line for %s is %q, want its MAC and client ID", lease.Addr, line)
		}
	}

	// Renewal (broadcast, ciaddr 0, options 50 and 54) moves the expiry.
	time.Sleep(1100 * time.Millisecond)
	for i, r := range []Request{mv, iv} {
		addr := leases[i].Addr.Addr().String()
		// The line as it stands, not an empty file being rewritten (the
		// last renewal's rewrite, or another): the wait below needs it.
		var before int64
		if !waitFor(func() bool { before, _ = d.expiry(addr); return before != 0 }) {
			t.Fatalf("%s has no line in the lease file before its renewal", addr)
		}
		renewed, err := c.Renew(ctxFor(t, 10*time.Second), leases[i], r)
		if err != nil || renewed.Addr != leases[i].Addr {
			t.Fatalf("Renew %s for %s: %v, %v", addr, r.who(), renewed.Addr, err)
		}
		if !waitFor(func() bool { e, _ := d.expiry(addr); return e > before }) {
			t.Errorf("renewing %s did not move its expiry in the lease file (was %d)", addr, before)
		}
		leases[i] = renewed
	}
	// Rebinding (no option 54, INIT-REBOOT style) is answered too.
	late := leases[0]
	late.Acquired = time.Now().Add(-110 * time.Second)
	if Plan(late, time.Now()).Phase != Rebinding {
		t.Fatal("the test lease is not rebinding")
	}
	if _, err := c.Renew(ctxFor(t, 10*time.Second), late, mv); err != nil {
		t.Fatalf("Renew while rebinding: %v", err)
	}

	renewingIsUnicast(t, l, d, c, mv, leases[0])

	for i, r := range []Request{mv, iv} {
		addr := leases[i].Addr.Addr().String()
		if err := c.Release(ctxFor(t, 5*time.Second), leases[i], r); err != nil {
			t.Fatalf("Release %s: %v", addr, err)
		}
		if !waitFor(func() bool { _, line := d.expiry(addr); return line == "" }) {
			t.Errorf("released %s, but its line stays in the lease file", addr)
		}
	}
}

// renewingIsUnicast shows why Renew does not send an RFC 2131 RENEWING
// request (ciaddr set): dnsmasq answers it by unicast to ciaddr, which in
// real life is in the container. The endpoint's macvlan link with the
// leased address is put in a "container" namespace; dnsmasq's ACK goes
// there (it resolves ciaddr by ARP), and the parent's socket misses it.
func renewingIsUnicast(t *testing.T, l *lan, d *dnsmasq, c *Client, r Request, lease Lease) {
	container := itest.NewNetns(t)
	child := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv1", ParentIndex: l.near.LinkIndex(lanParent), HardwareAddr: r.MAC}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := l.near.NL.LinkAdd(child); err != nil {
		t.Fatalf("add macvlan child: %v", err)
	}
	if err := l.near.NL.LinkSetNsFd(l.near.MustLink("mv1"), int(container.Handle())); err != nil {
		t.Fatal(err)
	}
	ip := lease.Addr.Addr().AsSlice()
	if err := container.NL.AddrAdd(container.MustLink("mv1"), &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(lease.Addr.Bits(), 32)}}); err != nil {
		t.Fatal(err)
	}
	container.Up("mv1")
	tap := newTap(t, l, r.MAC)
	acks := strings.Count(d.read(d.log), "DHCPACK(")
	p, err := c.ports.Get(r.Parent)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ports.Put(p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, err = c.exchange(ctx, p, r, func(xid dhcpv4.TransactionID) (*dhcpv4.DHCPv4, error) {
		return message(r, xid, dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(ip))
	}, answers(lease.Addr.Addr(), lease.ServerID, &notes{}), &notes{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RENEWING request (ciaddr %s, BROADCAST flag set): %v; want no answer on the parent", lease.Addr.Addr(), err)
	}
	// What dnsmasq did with the request is awaited, not read once when the
	// client gave up: it may answer (log, ARP for ciaddr, send) later.
	if !waitFor(func() bool { return strings.Count(d.read(d.log), "DHCPACK(") > acks }) {
		t.Fatalf("dnsmasq logged no DHCPACK for the RENEWING request: the test proves nothing")
	}
	if !waitFor(func() bool { return tap.count() > 0 }) {
		t.Fatalf("no unicast to %s on the parent: dnsmasq's ACK went elsewhere", r.MAC)
	}
	t.Logf("RENEWING request: dnsmasq acknowledged it by unicast to %s (%d frames to %s on the parent, seen by an ETH_P_ALL tap only)", lease.Addr.Addr(), tap.count(), r.MAC)
}
