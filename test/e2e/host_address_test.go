//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
)

// host_address through a real engine: `-o host_address=A` with
// `--aux-address host=A` gives the host (here the suite's namespace, where
// dockerd and the plugin run) the link ulh<12 characters of the network
// ID> on the parent with A/32 and a /32 route to every joined container,
// so the host and the containers reach each other; the link is re-made at
// the plugin's start and by its link watcher. Every address is in
// 198.18.200.0/24, on veth parent vp13.
const (
	haParent  = "vp13"
	haSubnet  = "198.18.200.0/24"
	haGateway = "198.18.200.1"
	haHost    = "198.18.200.2"
	haCtr     = "198.18.200.10"
	// haReach is how long each ping direction may take once the
	// container runs and the host link and route are in place. A working
	// host link answers at once; a budget as long as the kernel's
	// neighbour timeouts (a REACHABLE entry lasts 15-45 s, then 5 s of
	// DELAY and 3 unicast probes) would hide a neighbour entry that still
	// holds the MAC of the container's previous endpoint.
	haReach = 10 * time.Second
)

// nsPing pings addr once from the suite's namespace (never from the host's
// own): the host side of a network with a host address.
func nsPing(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "--", "busybox", "ping", "-c", "1", "-W", "2", addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping -c 1 -W 2 %s in %s: %w: %s", addr, nsName, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nsIP runs ip -n on the suite's namespace.
func nsIP(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"-n", nsName}, args...)...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("ip -n %s %s: %w: %s", nsName, strings.Join(args, " "), err, s)
	}
	return s, nil
}

// shimCheck checks the host link as the kernel shows it: nil error when it
// exists on haParent, is up, carries haHost/32 and a /32 route to every
// address in routes.
func shimCheck(shim string, routes ...string) error {
	link, err := nsIP("-d", "-o", "link", "show", "dev", shim)
	if err != nil {
		return err
	}
	if !strings.Contains(link, shim+"@"+haParent+":") {
		return fmt.Errorf("%s is not a child of %s: %s", shim, haParent, link)
	}
	if !strings.Contains(link, ",UP") && !strings.Contains(link, "<UP") {
		return fmt.Errorf("%s is not up: %s", shim, link)
	}
	addr, err := nsIP("-4", "-o", "addr", "show", "dev", shim)
	if err != nil {
		return err
	}
	if !strings.Contains(addr, "inet "+haHost+"/32 ") {
		return fmt.Errorf("%s has %q, want %s/32", shim, addr, haHost)
	}
	for _, r := range routes {
		out, err := nsIP("-4", "route", "show", r+"/32")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "dev "+shim) {
			return fmt.Errorf("route to %s/32 in %s: %q, want one through %s", r, nsName, out, shim)
		}
	}
	return nil
}

// TestHostAddress: the refusal without the aux address; then the host
// pings the container and the container pings the host after the network
// is created, after a container restart, a dockerd restart, a dockerd
// crash, the plugin force-disabled (its host link deleted meanwhile) and
// enabled, the plugin process killed, and the host link deleted under the
// running plugin.
func TestHostAddress(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	e.wantNoLeak(t, "before the test")

	t.Run("refused without --aux-address", func(t *testing.T) {
		out, err := e.docker("network", "create", "-d", plugin, "--subnet", haSubnet, "--gateway", haGateway,
			"-o", "parent="+haParent, "-o", "host_address="+haHost, "n7noaux")
		if err == nil {
			e.removeNetwork(t, "n7noaux")
			t.Fatal("network n7noaux with host_address and no --aux-address was created; want it refused")
		}
		t.Logf("refused: %s", out)
		if want := "--aux-address host=" + haHost; !strings.Contains(out, want) {
			t.Errorf("refusal does not name %q: %s", want, out)
		}
		if _, err := e.docker("network", "inspect", "n7noaux"); err == nil {
			t.Error("refused network n7noaux exists")
		}
		e.wantNoLeak(t, "after the refusal")
	})

	id := e.network(t, "n7", "-d", plugin, "--subnet", haSubnet, "--gateway", haGateway,
		"--aux-address", "host="+haHost, "-o", "parent="+haParent, "-o", "host_address="+haHost)
	shim := "ulh" + dockerid.Short(id)
	t.Logf("network n7 %s, host link %s", dockerid.Short(id), shim)
	c := e.run(t, ctr{name: "c7a", ip: haCtr}, "n7", "--restart=always")

	check := func(t *testing.T, phase string) {
		t.Helper()
		e.waitRunning(t, 90*time.Second, c.name)
		eventually(t, 30*time.Second, phase+": host link "+shim+" with "+haHost+"/32 and a route to "+c.ip, func() error {
			return shimCheck(shim, c.ip)
		})
		if host, err := linkNames(""); err != nil {
			t.Fatal(err)
		} else if strings.Contains(" "+strings.Join(host, " ")+" ", " "+shim+" ") {
			t.Errorf("%s: %s is in the host's own namespace; want it only in %s", phase, shim, nsName)
		}
		// Only the container's own namespace carries its address: a
		// namespace of an earlier start kept alive (by a mount of it in
		// some mount namespace) with its eth0 still on the parent would
		// answer for the container.
		// (Before the plugin mounted /run without the mounts below it, its
		// copy of the host's /run kept an old sandbox's namespace alive
		// after a dockerd crash.)
		eventually(t, 10*time.Second, phase+": only "+c.name+"'s network namespace carries "+c.ip, func() error {
			return onlyHolder(e, c.name, c.ip)
		})
		// Host first: the container's own ARP request for the host
		// would refresh the host's neighbour entry and hide a stale one.
		within(t, haReach, phase+": the host ("+nsName+") pings "+c.name+" at "+c.ip, func() error {
			return nsPing(c.ip)
		}, func() { e.hostAddrDiag(t, shim, c.name) })
		within(t, haReach, phase+": "+c.name+" pings the host at "+haHost, func() error {
			_, err := e.exec(c.name, "ping", "-c", "1", "-W", "2", haHost)
			return err
		}, func() { e.hostAddrDiag(t, shim, c.name) })
		mac, _ := e.exec(c.name, "cat", "/sys/class/net/eth0/address")
		neigh, _ := nsIP("-4", "neigh", "show", c.ip, "dev", shim)
		started, _ := e.docker("inspect", "-f", "{{.State.StartedAt}}", c.name)
		// The MAC the host's pings went to is the container's.
		if f := strings.Fields(neigh); len(f) < 3 || f[1] != "lladdr" || f[2] != mac {
			t.Errorf("%s: the host's neighbour entry for %s is %q, but %s's eth0 has MAC %s: the host's pings were answered by another interface", phase, c.ip, neigh, c.name, mac)
		}
		t.Logf("%s: host and %s reach each other (%s started %s, eth0 MAC %s; host's neighbour entry: %s)", phase, c.name, c.name, started, mac, neigh)
	}
	check(t, "after create")

	// prime starts a phase from a defined state, whatever an earlier
	// phase left: the host has just resolved the container afresh (its
	// neighbour entry flushed, then one ping), as a host talking to the
	// container would have.
	prime := func(t *testing.T) {
		t.Helper()
		if out, err := nsIP("-4", "neigh", "flush", "dev", shim); err != nil {
			t.Fatalf("flush the host's neighbour entries on %s: %v: %s", shim, err, out)
		}
		eventually(t, 30*time.Second, "before the phase: the host reaches "+c.name, func() error {
			return nsPing(c.ip)
		})
	}

	// Every start of the container is a new endpoint (a new random MAC
	// unless --mac-address) with the same address.
	t.Run("container restart", func(t *testing.T) {
		prime(t)
		e.must(t, "restart", "-t", "1", c.name)
		check(t, "after docker restart "+c.name)
	})
	t.Run("dockerd restart", func(t *testing.T) {
		prime(t)
		e.restartDockerd(t)
		check(t, "after a dockerd restart")
	})
	t.Run("dockerd crash", func(t *testing.T) {
		prime(t)
		e.crashDockerd(t)
		check(t, "after a dockerd crash")
	})
	t.Run("plugin disable -f, host link deleted, enable", func(t *testing.T) {
		prime(t)
		e.must(t, "plugin", "disable", "-f", plugin)
		eventually(t, 30*time.Second, "plugin process gone", func() error {
			if p := pluginPids(); len(p) > 0 {
				return fmt.Errorf("still running: %v", p)
			}
			return nil
		})
		e.waitRunning(t, 5*time.Second, c.name)
		// The plugin is down: nothing re-makes the host link until it
		// starts, so its start must.
		if _, err := nsIP("link", "show", "dev", shim); err == nil {
			if _, err := nsIP("link", "del", "dev", shim); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Logf("%s is already gone with the plugin disabled", shim)
		}
		// Control: without the host link the host does not reach the
		// container, so the pings of check prove the link.
		if err := nsPing(c.ip); err == nil {
			t.Fatalf("the host pings %s with %s deleted; want no route", c.ip, shim)
		}
		e.must(t, "plugin", "enable", plugin)
		check(t, "after the plugin was disabled, its host link deleted, and enabled")
	})
	t.Run("plugin killed", func(t *testing.T) {
		prime(t)
		e.killPlugin(t)
		check(t, "after the plugin process was killed")
	})
	t.Run("host link deleted under the running plugin", func(t *testing.T) {
		prime(t)
		before := ifindex(t, shim)
		if _, err := nsIP("link", "del", "dev", shim); err != nil {
			t.Fatal(err)
		}
		check(t, "after the host link was deleted under the running plugin")
		if after := ifindex(t, shim); after == before {
			t.Errorf("%s has ifindex %d as before the delete; want a new link", shim, after)
		}
	})

	// Leave removes the container's route; network rm removes the link.
	e.must(t, "rm", "-f", c.name)
	eventually(t, 15*time.Second, "route to "+c.ip+" gone after the container left", func() error {
		out, err := nsIP("-4", "route", "show", c.ip+"/32")
		if err != nil {
			return err
		}
		if out != "" {
			return fmt.Errorf("route still there: %s", out)
		}
		return shimCheck(shim)
	})
	e.must(t, "network", "rm", "n7")
	e.wantNoLeak(t, "after the network was removed")
}

// hostAddrDiag logs both ends of a failed ping: the host link, the
// namespace's routes and neighbours, and the container's interface and
// neighbours.
func (e *env) hostAddrDiag(t *testing.T, shim, c string) {
	t.Helper()
	for _, args := range [][]string{
		{"-d", "link", "show", "dev", shim},
		{"addr", "show", "dev", shim},
		{"-4", "route"},
		{"-4", "neigh", "show", "dev", shim},
		{"-d", "link", "show", "dev", haParent},
	} {
		out, err := nsIP(args...)
		t.Logf("host: ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, cmd := range []string{"ip link show eth0", "ip -4 addr show dev eth0", "ip -4 route", "ip -4 neigh"} {
		out, err := e.exec(c, "sh", "-c", cmd)
		t.Logf("%s: %s: %v\n%s", c, cmd, err, out)
	}
	// The usual cause: the host's neighbour entry for the container's
	// address still holds the MAC of its previous endpoint.
	mac, err := e.exec(c, "cat", "/sys/class/net/eth0/address")
	neigh, nerr := nsIP("-4", "neigh", "show", haCtr, "dev", shim)
	if err == nil && nerr == nil {
		if f := strings.Fields(neigh); len(f) >= 3 && f[1] == "lladdr" && f[2] != mac {
			t.Errorf("stale neighbour entry: the host's %s holds %s for %s, but %s's eth0 has MAC %s (the container's previous endpoint's MAC; nothing replaced or flushed the entry when the endpoint changed)", shim, f[2], haCtr, c, mac)
		}
	}
}

// netnsHolders finds every network namespace on the machine, other than
// the suite's, that has an interface with IPv4 address addr: those of
// processes, and those held only by a mount of the namespace file (nsfs)
// in some mount namespace, such as a plugin's. It maps each namespace's
// inode to where it was found. It only reads.
func netnsHolders(addr string) (map[uint64][]string, error) {
	suiteNS, err := nsInode(nsPath)
	if err != nil {
		return nil, err
	}
	paths, holds, err := machineNetns()
	if err != nil {
		return nil, err
	}
	where := map[uint64][]string{}
	for ino, hs := range holds {
		for _, h := range hs {
			where[ino] = append(where[ino], h.String())
		}
	}
	delete(paths, suiteNS)
	out := map[uint64][]string{}
	for ino, path := range paths {
		b, err := exec.Command("nsenter", "--net="+path, "--", "ip", "-o", "-4", "addr", "show").CombinedOutput()
		if err != nil {
			continue // a namespace of a process that has just exited
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, " inet "+addr+"/") {
				dev := strings.Fields(l)[1]
				link, _ := exec.Command("nsenter", "--net="+path, "--", "ip", "-o", "link", "show", "dev", dev).CombinedOutput()
				mac := ""
				if f := strings.Fields(string(link)); len(f) > 0 {
					for i, x := range f {
						if x == "link/ether" && i+1 < len(f) {
							mac = f[i+1]
						}
					}
				}
				sort.Strings(where[ino])
				out[ino] = append([]string{fmt.Sprintf("%s MAC %s", dev, mac)}, where[ino]...)
			}
		}
	}
	return out, nil
}

// onlyHolder is nil when the container's network namespace is the only
// one on the machine (besides the suite's) that carries addr.
func onlyHolder(e *env, name, addr string) error {
	pid, err := e.docker("inspect", "-f", "{{.State.Pid}}", name)
	if err != nil {
		return err
	}
	own, err := nsInode("/proc/" + pid + "/ns/net")
	if err != nil {
		return err
	}
	holders, err := netnsHolders(addr)
	if err != nil {
		return err
	}
	var others []string
	for ino, where := range holders {
		if ino != own {
			others = append(others, fmt.Sprintf("net:[%d]: %s", ino, strings.Join(where, "; ")))
		}
	}
	if len(others) > 0 {
		sort.Strings(others)
		return fmt.Errorf("%s (pid %s, net:[%d]) is not alone: other network namespaces carry %s on an interface: %s", name, pid, own, addr, strings.Join(others, " | "))
	}
	if _, ok := holders[own]; !ok {
		return fmt.Errorf("%s's network namespace net:[%d] does not carry %s", name, own, addr)
	}
	return nil
}
