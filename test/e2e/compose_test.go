//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestCompose drives underlay through `docker compose` as users write
// compose files: a macvlan network of the driver with underlay's IPAM
// (a static subnet, the parent given to both), and services with a fixed
// address and MAC (ipv4_address, mac_address), with none (the IPAM picks),
// and, on engines that honour interface names, with interface_name.
// Through `up --force-recreate`, `down` and `up` (Compose removes the
// network and creates it again), and a dockerd restart without
// live-restore (a reboot: the containers stop, restart: always brings
// them back), each container keeps its address and MAC, as Docker and the
// container itself see them: the fixed ones because the file says so and
// the driver's stable MAC follows the address (every endpoint without
// mac_address at an address has the same MAC); the named one because the
// current engine sends the container's name with RequestAddress and the
// IPAM gives a name its address again, though a lower one is free by then
// (a squatter held it at the first `up`). 20.10 sends no name: there the
// named one only gets some address of the subnet; nor does it get
// mac_address from Compose v5 (takesEndpointMAC), so the fixed one has the
// stable MAC of its address there. `down` leaves nothing.
//
// Parent vp2, subnet 198.18.2.0/24.
func TestCompose(t *testing.T) {
	e := need(t)
	e.ensureIPAMPlugin(t)
	start := time.Now()
	const project, parent = "ucompose", "vp2"
	subnet := netip.MustParsePrefix("198.18.2.0/24")
	gateway := netip.MustParseAddr("198.18.2.1")
	netName := composeNetwork(project, "lan")
	sticky := engine.sendsEndpointName()

	type service struct {
		name   string     // the service
		ifname string     // its interface inside
		addr   netip.Addr // ipv4_address; zero: the IPAM picks
		mac    string     // mac_address; "": the driver's stable MAC
		same   bool       // keeps address and MAC through re-creation
		was    endpoint   // what it had the phase before
	}
	// The first service's mac_address, where the engine gets it (see
	// takesEndpointMAC).
	services := []*service{
		{name: "fixed", ifname: "eth0", addr: netip.MustParseAddr("198.18.2.10"), mac: "02:42:c6:12:02:0a", same: true},
		{name: "named", ifname: "eth0", same: sticky},
	}
	if engine.honoursIfname() {
		services = append(services, &service{name: "ifname", ifname: "lan0", addr: netip.MustParseAddr("198.18.2.11"), same: true})
	}
	t.Logf("%s: services %d, named keeps its address: %v", engine, len(services), sticky)

	yaml := fmt.Sprintf(`services:
  fixed:
    image: %[1]s
    command: ["sleep", "86400"]
    restart: always
    stop_grace_period: 1s
    mac_address: "02:42:c6:12:02:0a"
    networks:
      lan:
        ipv4_address: 198.18.2.10
  named:
    image: %[1]s
    command: ["sleep", "86400"]
    restart: always
    stop_grace_period: 1s
    networks:
      - lan
  squatter:
    image: %[1]s
    command: ["sleep", "86400"]
    stop_grace_period: 1s
    profiles: ["squat"]
    networks:
      - lan
`, imageTag)
	if engine.honoursIfname() {
		yaml += fmt.Sprintf(`  ifname:
    image: %[1]s
    command: ["sleep", "86400"]
    restart: always
    stop_grace_period: 1s
    networks:
      lan:
        ipv4_address: 198.18.2.11
        interface_name: lan0
`, imageTag)
	}
	yaml += fmt.Sprintf(`networks:
  lan:
    driver: %[1]s
    driver_opts:
      parent: %[2]s
    ipam:
      driver: %[1]s
      config:
        - subnet: 198.18.2.0/24
          gateway: 198.18.2.1
      options:
        parent: %[2]s
`, plugin, parent)
	file := e.composeProject(t, project, yaml)

	ids := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, s := range services {
			out[s.name] = e.must(t, "inspect", "-f", "{{.Id}}", composeContainer(project, s.name))
		}
		return out
	}
	netID := func() string { t.Helper(); return e.must(t, "network", "inspect", "-f", "{{.Id}}", netName) }

	// stableMAC checks that the driver's stable MAC is the address's:
	// every endpoint without mac_address seen at an address (whichever
	// container, phase, network) has the MAC the first one there had.
	macAt := map[netip.Addr]string{}
	stableMAC := func(what string, v endpoint) {
		t.Helper()
		a := v.addr.Addr()
		if m, ok := macAt[a]; ok && m != v.mac.String() {
			t.Errorf("%s: %s has MAC %s, where an endpoint at that address had %s; want the driver's stable MAC of the address", what, a, v.mac, m)
		}
		macAt[a] = v.mac.String()
	}

	// check waits until every container has its address and MAC, as
	// docker inspect and the container see them, and the containers reach
	// each other.
	check := func(phase string) {
		t.Helper()
		for _, s := range services {
			c := composeContainer(project, s.name)
			got := e.waitEndpoint(t, c, netName, s.ifname, func(v endpoint) error {
				switch {
				case v.addr.Masked() != subnet || v.addr.Bits() != subnet.Bits():
					return fmt.Errorf("want an address of %s", subnet)
				case v.addr.Addr() == gateway:
					return fmt.Errorf("the gateway's address %s", gateway)
				case s.addr.IsValid() && v.addr.Addr() != s.addr:
					return fmt.Errorf("want ipv4_address %s", s.addr)
				case s.mac != "" && v.mac.String() != s.mac:
					return fmt.Errorf("want mac_address %s", s.mac)
				case s.same && s.was.addr.IsValid() && (v.addr != s.was.addr || v.mac.String() != s.was.mac.String()):
					return fmt.Errorf("want %s as before", s.was)
				}
				return nil
			})
			links, err := e.exec(c, "ls", "/sys/class/net")
			if err != nil {
				t.Fatal(err)
			}
			if l := strings.Join(strings.Fields(links), " "); l != s.ifname+" lo" {
				t.Errorf("%s: %s: interfaces %q, want %s and lo", phase, c, l, s.ifname)
			}
			t.Logf("%s: %s: %s on %s", phase, c, got, s.ifname)
			if s.mac == "" {
				stableMAC(phase+": "+c, got)
			}
			s.was = got
		}
		for _, a := range services {
			for _, b := range services {
				if a != b {
					e.ping(t, composeContainer(project, a.name), b.was.addr.Addr().String())
				}
			}
		}
	}

	// The squatter (a service of a profile no later `up` enables) holds
	// the lowest free address while named gets its first one, and is gone
	// before named is re-created: from then on an IPAM that went by
	// lowest free address would move named there, one that keeps names
	// does not.
	e.compose(t, project, file, "up", "-d", "squatter")
	squatter := composeContainer(project, "squatter")
	squat := e.waitEndpoint(t, squatter, netName, "eth0", func(v endpoint) error {
		if v.addr.Masked() != subnet {
			return fmt.Errorf("want an address of %s", subnet)
		}
		return nil
	})
	t.Logf("squatter: %s holds %s", squatter, squat)
	stableMAC("squatter", squat)
	e.compose(t, project, file, "up", "-d")
	if !engine.takesEndpointMAC() {
		// Compose v5 sends mac_address only as the endpoint's MAC, which
		// engines before API 1.44 ignore; they take container.Config's,
		// which Compose leaves empty: the container gets the driver's
		// stable MAC for its address instead, which the phases below
		// hold to as they do the others'.
		fixed := services[0]
		sent := e.must(t, "inspect", "-f", "{{.Config.MacAddress}}", composeContainer(project, fixed.name))
		t.Logf("%s: Compose sent mac_address %s in container.Config as %q", engine, fixed.mac, sent)
		if sent != fixed.mac {
			fixed.mac = ""
		}
	}
	check("up")
	if t.Failed() {
		t.FailNow()
	}
	e.compose(t, project, file, "rm", "--stop", "--force", "squatter")
	eventually(t, 15*time.Second, squatter+" removed", func() error {
		if _, err := e.docker("inspect", squatter); err == nil {
			return fmt.Errorf("%s still exists", squatter)
		}
		return nil
	})
	t.Logf("%s is free now; named holds %s", squat.addr.Addr(), services[1].was.addr.Addr())

	before := ids()
	e.compose(t, project, file, "up", "-d", "--force-recreate")
	for name, id := range ids() {
		if id == before[name] {
			t.Errorf("up --force-recreate: %s is still container %.12s", name, id)
		}
	}
	check("up --force-recreate")

	oldNet := netID()
	e.compose(t, project, file, "down", "-t", "1")
	e.networkGone(t, netName)
	e.compose(t, project, file, "up", "-d")
	if id := netID(); id == oldNet {
		t.Errorf("down and up: network %s is still %.12s; want Compose to have created it again", netName, id)
	}
	check("down and up")

	// A reboot without live-restore: dockerd stops the containers, and
	// the new one starts them again (restart: always).
	if lr := e.must(t, "info", "-f", "{{.LiveRestoreEnabled}}"); lr != "false" {
		t.Fatalf("the suite's engine runs with live-restore %s; this step wants a restart without it", lr)
	}
	before = ids()
	started := map[string]string{}
	for _, s := range services {
		started[s.name] = e.must(t, "inspect", "-f", "{{.State.StartedAt}}", composeContainer(project, s.name))
	}
	e.restartDockerd(t)
	var names []string
	for _, s := range services {
		names = append(names, composeContainer(project, s.name))
	}
	e.waitRunning(t, 90*time.Second, names...)
	for name, id := range ids() {
		if id != before[name] {
			t.Errorf("dockerd restart: %s is container %.12s, was %.12s; want restart: always to start the same one", name, id, before[name])
		}
	}
	for _, s := range services {
		if at := e.must(t, "inspect", "-f", "{{.State.StartedAt}}", composeContainer(project, s.name)); at == started[s.name] {
			t.Errorf("dockerd restart: %s was not started again (started at %s, as before)", s.name, at)
		}
	}
	check("dockerd restart")

	e.compose(t, project, file, "down", "-t", "1")
	e.networkGone(t, netName)
	if out := e.must(t, "ps", "-aq", "--filter", "label=com.docker.compose.project="+project); out != "" {
		t.Errorf("compose down left containers: %s", out)
	}
	e.wantNoLeak(t, "after compose down")
	t.Logf("TestCompose on %s: %s", engineLabel, time.Since(start).Round(time.Millisecond))
}

// takesEndpointMAC: the engine takes an endpoint's MAC from the endpoint
// settings of a container create (API 1.44, engine 25), where Compose v5
// puts a service's mac_address; 20.10 takes only container.Config's
// MacAddress (`docker run --mac-address` of the 20.10 client), which
// Compose v5 no longer sets.
func (g engineInfo) takesEndpointMAC() bool { return g.apiAtLeast(1, 44) }
