//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// TestComposeDHCP: a container's LAN identity follows its name on a DHCP
// network of underlay's IPAM (issue 36), as users write it in a compose
// file: `ipam: {driver: underlay, options: {parent: …, dhcp: "true"}}`
// on the LAN's subnet. On the current engine (which sends the container's
// name with RequestAddress) the container gets the MAC of its name, the
// one `underlay mac` prints; dnsmasq leases the address to that MAC with
// a client ID of it and the name as host name, and its DNS resolves the
// name from inside the container; `up --force-recreate`, `down` and `up`
// (a new network), and a dockerd restart without live-restore give it the
// same MAC and the same lease; `down` leaves no lease. 20.10 sends no
// name: the container gets a lease of a random MAC (said in the log) and
// `down` leaves no lease.
func TestComposeDHCP(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	start := time.Now()
	e.wantNoLeak(t, "before the test")
	dns := e.makeDHCPLAN(t)
	const project, name = "udhcp", "web"
	netName := composeNetwork(project, "lan")
	yaml := fmt.Sprintf(`services:
  web:
    image: %[1]s
    container_name: %[2]s
    command: ["sleep", "86400"]
    restart: always
    stop_grace_period: 1s
    networks:
      - lan
networks:
  lan:
    driver: %[3]s
    driver_opts:
      parent: %[4]s
    ipam:
      driver: %[3]s
      config:
        - subnet: %[5]s
          gateway: %[6]s
      options:
        parent: %[4]s
        dhcp: "true"
`, imageTag, name, plugin, dhcpParent, dhcpRange, dhcpRouter)
	file := e.composeProject(t, project, yaml)

	named := engine.sendsEndpointName()
	var mac string
	if named {
		mac = e.underlayMAC(t, dhcpParent, name)
	}
	var was endpoint
	// check waits until the container has a lease of the LAN, as Docker,
	// the container and dnsmasq see it: with names, the name's MAC, the
	// client ID of it, the name, and the same as the phase before.
	check := func(phase string) {
		t.Helper()
		got := e.waitEndpoint(t, name, netName, "eth0", func(v endpoint) error {
			switch {
			case v.addr.Masked() != dhcpRange || v.addr.Addr() == netip.MustParseAddr(dhcpRouter):
				return fmt.Errorf("want an address dnsmasq leases in %s", dhcpRange)
			case named && v.mac.String() != mac:
				return fmt.Errorf("want the MAC of name %s, %s", name, mac)
			case named && was.addr.IsValid() && v.addr != was.addr:
				return fmt.Errorf("want %s as before", was.addr)
			}
			return nil
		})
		want := func(l itest.DnsmasqLease) bool {
			if !named {
				return l.MAC == got.mac.String()
			}
			return l.MAC == mac && l.Hostname == name && l.ClientID == "01:"+mac
		}
		l, ok := dns.WaitLease(leaseWait, got.addr.Addr(), want)
		if !ok {
			t.Fatalf("%s: %s has %s; dnsmasq's lease file has %q, want the container's MAC (and, with names, client ID 01:MAC and host name %s)", phase, name, got, l.Line, name)
		}
		t.Logf("%s: %s: %s; dnsmasq: %s", phase, name, got, l.Line)
		was = got
	}

	// down takes the project down: the container's lease is released
	// (dnsmasq logs it and drops it) and no other is left.
	down := func() {
		t.Helper()
		a, m := was.addr.Addr(), was.mac.String()
		before := dns.Released(a, m)
		e.compose(t, project, file, "down", "-t", "1")
		e.networkGone(t, netName)
		if err := dns.WaitReleased(leaseWait, a, m, before); err != nil {
			t.Fatal(err)
		}
		eventually(t, leaseWait, "no lease left after compose down", func() error {
			if ls := dns.Leases(); len(ls) > 0 {
				return fmt.Errorf("leases %v", ls)
			}
			return nil
		})
	}

	e.markLog()
	e.compose(t, project, file, "up", "-d")
	check("up")
	if !named {
		if log, ok := e.waitLogSinceMark(func(log string) bool { return strings.Contains(log, "the engine sent no endpoint name") }); !ok {
			t.Fatalf("%s sends no endpoint name, and the plugin did not say so in the log:\n%s", engine, log)
		}
		down()
		t.Logf("TestComposeDHCP on %s (no names): %s", engineLabel, time.Since(start).Round(time.Millisecond))
		return
	}
	eventually(t, 15*time.Second, "the LAN's DNS resolves "+name, func() error {
		out, _ := e.exec(name, "nslookup", name, dhcpRouter)
		if !strings.Contains(out, "Address: "+was.addr.Addr().String()) {
			return fmt.Errorf("nslookup %s %s in %s:\n%s", name, dhcpRouter, name, out)
		}
		return nil
	})

	e.compose(t, project, file, "up", "-d", "--force-recreate")
	check("up --force-recreate")

	down()
	e.compose(t, project, file, "up", "-d")
	check("down and up")

	if lr := e.must(t, "info", "-f", "{{.LiveRestoreEnabled}}"); lr != "false" {
		t.Fatalf("the suite's engine runs with live-restore %s; this step wants a restart without it", lr)
	}
	e.restartDockerd(t)
	e.waitRunning(t, 90*time.Second, name)
	check("dockerd restart")

	down()
	dns.Stop()
	if err := teardownDHCPLAN(); err != nil {
		t.Fatal(err)
	}
	e.wantNoLeak(t, "after compose down")
	t.Logf("TestComposeDHCP on %s: %s", engineLabel, time.Since(start).Round(time.Millisecond))
}

// underlayMAC is what `underlay mac --parent PARENT NAME` prints in the
// suite's namespace.
func (e *env) underlayMAC(t *testing.T, parent, name string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", nsName, filepath.Join(e.root, "bin", "underlay"), "mac", "--parent", parent, name).Output()
	if err != nil {
		t.Fatalf("underlay mac --parent %s %s: %v", parent, name, err)
	}
	return strings.TrimSpace(string(out))
}
