//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// view is what a container sees of its interface.
type view map[string]string

// The scenario of points 1 and 2: a macvlan network on veth parent vp1
// with IPv4 and IPv6, mtu 1400 (the parent has 1500), and two containers
// with fixed addresses and MACs.
var (
	scenarioNet = []string{"--ipv6",
		"--subnet", "198.18.1.0/24", "--gateway", "198.18.1.1",
		"--subnet", "2001:db8:1::/64", "--gateway", "2001:db8:1::1",
		"-o", "parent=vp1", "-o", "mtu=1400"}
	scenarioCtrs = []ctr{
		{name: "c1a", ip: "198.18.1.10", ip6: "2001:db8:1::10", mac: "02:42:c6:12:01:0a"},
		{name: "c1b", ip: "198.18.1.11", ip6: "2001:db8:1::11", mac: "02:42:c6:12:01:0b"},
	}
)

// scenario runs the scenario with a driver: containers reach each other
// over IPv4 and IPv6. It returns what each container sees and the
// network's inspect output, and removes everything before returning.
func (e *env) scenario(t *testing.T, driver string) ([]view, netInspect) {
	t.Helper()
	e.network(t, "n1", append([]string{"-d", driver}, scenarioNet...)...)
	var cs []ctr
	for _, c := range scenarioCtrs {
		cs = append(cs, e.run(t, c, "n1"))
	}
	e.pingAll(t, cs...)
	var views []view
	for _, c := range cs {
		views = append(views, e.containerView(t, c.name))
	}
	var ni []netInspect
	if err := e.jsonOut(&ni, "network", "inspect", "n1"); err != nil || len(ni) != 1 {
		t.Fatalf("network inspect n1: %v %v", ni, err)
	}
	for _, c := range cs {
		e.must(t, "rm", "-f", c.name)
	}
	e.must(t, "network", "rm", "n1")
	return views, ni[0]
}

type netInspect struct {
	ID         string `json:"Id"`
	Driver     string
	Scope      string
	EnableIPv6 bool
	Options    map[string]string
	IPAM       struct {
		Config []struct{ Subnet, Gateway string }
	}
}

var ifIndexPrefix = regexp.MustCompile(`^[0-9]+: `)

// containerView reads eth0 as the container sees it.
func (e *env) containerView(t *testing.T, c string) view {
	t.Helper()
	v := view{}
	for key, cmd := range map[string]string{
		"mac":    "cat /sys/class/net/eth0/address",
		"mtu":    "cat /sys/class/net/eth0/mtu",
		"parent": "cat /sys/class/net/eth0/iflink",
		"ipv4":   "ip -4 -o addr show dev eth0",
		"ipv6":   "ip -6 -o addr show dev eth0 scope global",
		"route4": "ip -4 route",
		"route6": "ip -6 route | grep -v ^multicast",
		"links":  "ls /sys/class/net",
	} {
		out, err := e.exec(c, "sh", "-c", cmd)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(out, "\n")
		for i := range lines {
			// `ip -o addr` starts with the interface index, which
			// depends on how many links the kernel made before.
			lines[i] = strings.Join(strings.Fields(ifIndexPrefix.ReplaceAllString(lines[i], "")), " ")
		}
		sort.Strings(lines)
		v[key] = strings.Join(lines, "\n")
	}
	return v
}

// Point 1: the requested addresses and MAC, reachability over both
// families, the mtu option inside the container, the options in inspect.
func TestMacvlanNetwork(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	views, ni := e.scenario(t, plugin)
	vp1 := fmt.Sprint(ifindex(t, "vp1"))
	for i, c := range scenarioCtrs {
		v := views[i]
		t.Logf("%s sees: %v", c.name, v)
		if v["mac"] != c.mac {
			t.Errorf("%s: eth0 MAC %s, want %s", c.name, v["mac"], c.mac)
		}
		if !strings.Contains(v["ipv4"], "inet "+c.ip+"/24 ") {
			t.Errorf("%s: IPv4 %q, want %s/24", c.name, v["ipv4"], c.ip)
		}
		if !strings.Contains(v["ipv6"], "inet6 "+c.ip6+"/64 ") {
			t.Errorf("%s: IPv6 %q, want %s/64", c.name, v["ipv6"], c.ip6)
		}
		if v["mtu"] != "1400" {
			t.Errorf("%s: eth0 MTU %s, want 1400 (-o mtu=1400; the parent has 1500)", c.name, v["mtu"])
		}
		if v["parent"] != vp1 {
			t.Errorf("%s: eth0 hangs off ifindex %s, want vp1 (%s)", c.name, v["parent"], vp1)
		}
		if !strings.Contains(v["route4"], "default via 198.18.1.1 dev eth0") || !strings.Contains(v["route6"], "default via 2001:db8:1::1 dev eth0") {
			t.Errorf("%s: routes %q / %q, want default routes via the gateways", c.name, v["route4"], v["route6"])
		}
		if v["links"] != "eth0\nlo" {
			t.Errorf("%s: interfaces %q, want only eth0 and lo (no gateway bridge)", c.name, v["links"])
		}
	}
	if want := map[string]string{"parent": "vp1", "mtu": "1400"}; !reflect.DeepEqual(ni.Options, want) {
		t.Errorf("docker network inspect: Options %v, want %v", ni.Options, want)
	}
	if ni.Driver != plugin || !ni.EnableIPv6 || ni.Scope != "local" || len(ni.IPAM.Config) != 2 {
		b, _ := json.Marshal(ni)
		t.Errorf("docker network inspect: %s", b)
	}
	e.wantNoLeak(t, "after the network was removed")
}

// Point 2: Docker's built-in macvlan driver, same scenario, same parent,
// same addresses: the containers see the same thing, except the MTU: the
// built-in driver ignores -o mtu and gives the parent's 1500.
func TestParityWithBuiltinMacvlan(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	ours, oursNet := e.scenario(t, plugin)
	builtin, builtinNet := e.scenario(t, "macvlan")
	for i, c := range scenarioCtrs {
		o, b := ours[i], builtin[i]
		if o["mtu"] != "1400" || b["mtu"] != "1500" {
			t.Errorf("%s: MTU underlay %s, built-in %s; want 1400 and 1500 (the built-in ignores -o mtu)", c.name, o["mtu"], b["mtu"])
		}
		for k := range o {
			if k != "mtu" && o[k] != b[k] {
				t.Errorf("%s: %s differs:\nunderlay: %q\nbuilt-in: %q", c.name, k, o[k], b[k])
			}
		}
	}
	if !reflect.DeepEqual(oursNet.Options, builtinNet.Options) || !reflect.DeepEqual(oursNet.IPAM, builtinNet.IPAM) || oursNet.Scope != builtinNet.Scope {
		t.Errorf("network inspect differs:\nunderlay: %+v\nbuilt-in: %+v", oursNet, builtinNet)
	}
	e.wantNoLeak(t, "after both scenarios")
}

// Point 3: a second network that really conflicts with one on the same
// parent is refused, and the message names the holder; one that does not
// conflict is accepted.
func TestConflictRefused(t *testing.T) {
	e := need(t)
	e.ensurePlugin(t)
	holder := e.network(t, "n3", "-d", plugin, "--subnet", "198.18.3.0/24", "-o", "parent=vp3")
	e.run(t, ctr{name: "c3a", ip: "198.18.3.10"}, "n3")

	e.wantRefused(t, "n3pt", "vp3", holder, "passthru takes the parent link exclusively", "--subnet", "198.18.30.0/24", "-o", "parent=vp3", "-o", "macvlan_mode=passthru")
	// One engine's default IPAM refuses an overlapping pool before any
	// driver is asked, so the overlap that reaches underlay comes from an
	// IPAM driver with another address space: null hands 0.0.0.0/0.
	out, err := e.docker("network", "create", "-d", plugin, "--subnet", "198.18.3.128/25", "-o", "parent=vp3", "n3ov")
	if err == nil || !strings.Contains(out, "Pool overlaps") {
		e.removeNetwork(t, "n3ov")
		t.Errorf("overlapping --subnet on one engine: %v %s; want Docker's IPAM refusal", err, out)
	}
	e.wantRefused(t, "n3null", "vp3", holder, "overlaps the subnet", "--ipam-driver", "null", "-o", "parent=vp3")

	// A compatible network on the same parent is fine, and both work.
	e.network(t, "n3ok", "-d", plugin, "--subnet", "198.18.31.0/24", "-o", "parent=vp3")
	e.run(t, ctr{name: "c3b", ip: "198.18.31.10"}, "n3ok")
	e.oneShot(t, "n3", "", "198.18.3.10")
	e.oneShot(t, "n3ok", "", "198.18.31.10")
	e.wantNoLeak(t, "with containers running after refusals")
}
