package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseServeDefaultsEnvAndFlags(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c, err := parseServe(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := serveConfig{Socket: "/run/docker/plugins/underlay.sock", State: "/var/lib/underlay/underlay.db", LogLevel: "info", DockerHost: "unix:///var/run/docker.sock", Scope: "local",
		Reservation: time.Minute, ResolvConf: "/etc/resolv.conf", ContainerRepairWait: 5 * time.Minute}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults %+v, want %+v", c, want)
	}
	env = map[string]string{"LOG_LEVEL": "DEBUG", "SCOPE": "global", "STATE": "/s/u.db", "DOCKER_HOST": "unix:///d.sock"}
	if c, err = parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.LogLevel != "debug" || c.Scope != "global" || c.State != "/s/u.db" || c.DockerHost != "unix:///d.sock" {
		t.Fatalf("from the environment: %+v %v", c, err)
	}
	c, err = parseServe([]string{"--scope", "local", "--state=/f.db", "--log-level", "error", "--docker-host", "unix:///f.sock", "--socket", "/x.sock"}, getenv, &bytes.Buffer{})
	if err != nil || c.Scope != "local" || c.State != "/f.db" || c.LogLevel != "error" || c.DockerHost != "unix:///f.sock" || c.Socket != "/x.sock" {
		t.Fatalf("flags must win over the environment: %+v %v", c, err)
	}
	for _, args := range [][]string{{"--scope", "cluster"}, {"--log-level", "trace"}, {"--docker-host", "/var/run/docker.sock"}, {"--socket", ""}, {"extra"}, {"--nope"},
		{"--default-address-pool", "198.18.0.0/15"}, {"--default-address-pool", "base=198.18.0.0/15,size=8"}, {"--default-address-pool", "base=198.18.1.0/15,size=24"},
		{"--default-address-pool", "base=198.18.0.0/15,size=24,x=1"}, {"--pool-reservation-timeout", "soon"}, {"--pool-reservation-timeout", "-1s"},
		{"--container-repair-wait", "-1s"}, {"--container-repair-wait", "later"}} {
		if _, err := parseServe(args, getenv, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// --container-repair-wait (CONTAINER_REPAIR_WAIT): 0 turns the repair
// off (a negative wait for the driver), the flag wins.
func TestParseServeContainerRepairWait(t *testing.T) {
	env := map[string]string{"CONTAINER_REPAIR_WAIT": "0"}
	getenv := func(k string) string { return env[k] }
	if c, err := parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.ContainerRepairWait >= 0 {
		t.Fatalf("CONTAINER_REPAIR_WAIT=0: %v %v, want off (negative)", c.ContainerRepairWait, err)
	}
	if c, err := parseServe([]string{"--container-repair-wait", "30s"}, getenv, &bytes.Buffer{}); err != nil || c.ContainerRepairWait != 30*time.Second {
		t.Fatalf("--container-repair-wait 30s over the environment: %v %v", c.ContainerRepairWait, err)
	}
}

func TestParseServeAddressPools(t *testing.T) {
	env := map[string]string{"DEFAULT_ADDRESS_POOLS": "base=198.18.0.0/16,size=24 base=2001:db8::/48,size=64", "POOL_RESERVATION_TIMEOUT": "5m"}
	getenv := func(k string) string { return env[k] }
	c, err := parseServe(nil, getenv, &bytes.Buffer{})
	if err != nil || fmt.Sprint(c.Bases) != "[base=198.18.0.0/16,size=24 base=2001:db8::/48,size=64]" || c.Reservation != 5*time.Minute {
		t.Fatalf("from the environment: %v %v %v", c.Bases, c.Reservation, err)
	}
	c, err = parseServe([]string{"--default-address-pool", "base=198.19.0.0/16,size=26", "--default-address-pool=base=198.18.128.0/17,size=24", "--pool-reservation-timeout", "2s"}, getenv, &bytes.Buffer{})
	if err != nil || fmt.Sprint(c.Bases) != "[base=198.19.0.0/16,size=26 base=198.18.128.0/17,size=24]" || c.Reservation != 2*time.Second {
		t.Fatalf("flags must replace the environment's pools: %v %v %v", c.Bases, c.Reservation, err)
	}
	env["DEFAULT_ADDRESS_POOLS"] = "base=198.18.0.0/16"
	if _, err := parseServe(nil, getenv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "DEFAULT_ADDRESS_POOLS") {
		t.Fatalf("a bad DEFAULT_ADDRESS_POOLS: %v", err)
	}
}

func TestParseServeMetricsListen(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if c, err := parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.MetricsListen != "" {
		t.Fatalf("default: %q %v, want off", c.MetricsListen, err)
	}
	env["METRICS_LISTEN"] = "127.0.0.1:9323"
	if c, err := parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.MetricsListen != "127.0.0.1:9323" {
		t.Fatalf("from the environment: %q %v", c.MetricsListen, err)
	}
	if c, err := parseServe([]string{"--metrics-listen", "[::1]:9400"}, getenv, &bytes.Buffer{}); err != nil || c.MetricsListen != "[::1]:9400" {
		t.Fatalf("the flag must win: %q %v", c.MetricsListen, err)
	}
	for _, bad := range []string{"9323", "127.0.0.1", "127.0.0.1:", "unix:///m.sock"} {
		if _, err := parseServe([]string{"--metrics-listen", bad}, getenv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
			t.Errorf("--metrics-listen %q: %v", bad, err)
		}
	}
}

func TestRunCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "underlay ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run(nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no command: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
}

// TestNoShellingOut: nothing the binary links can run another program;
// every kernel change goes through netlink.
func TestNoShellingOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "os/exec" {
			t.Fatal("the underlay binary depends on os/exec")
		}
	}
}

// TestManagedPluginConfig checks config.json against what the daemon
// expects: the socket it serves by default, state on the propagated mount,
// the settable environment it reads, and no capability beyond
// CAP_NET_ADMIN (links) and CAP_NET_RAW (DHCP's packet sockets).
func TestManagedPluginConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Entrypoint []string
		Interface  struct {
			Types  []string
			Socket string
		}
		Network         struct{ Type string }
		Linux           struct{ Capabilities []string }
		PropagatedMount string
		Mounts          []struct {
			Source, Destination string
			Options             []string
		}
		Env []struct {
			Name, Value string
			Settable    []string
		}
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	def, err := parseServe(nil, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Join(cfg.Entrypoint, " ") != "/underlay serve":
		t.Errorf("entrypoint %v", cfg.Entrypoint)
	case strings.Join(cfg.Interface.Types, " ") != "docker.networkdriver/1.0 docker.ipamdriver/1.0":
		t.Errorf("interface types %v", cfg.Interface.Types)
	case "/run/docker/plugins/"+cfg.Interface.Socket != def.Socket:
		t.Errorf("socket %s is not the daemon's default %s", cfg.Interface.Socket, def.Socket)
	case cfg.Network.Type != "host":
		t.Errorf("network type %s: the links must be made in the host namespace", cfg.Network.Type)
	case strings.Join(cfg.Linux.Capabilities, " ") != "CAP_NET_ADMIN CAP_NET_RAW":
		t.Errorf("capabilities %v: CAP_NET_ADMIN is all link work needs, CAP_NET_RAW all DHCP needs", cfg.Linux.Capabilities)
	case filepath.Dir(def.State) != cfg.PropagatedMount:
		t.Errorf("default state %s is not on the propagated mount %s", def.State, cfg.PropagatedMount)
	}
	for _, m := range cfg.Mounts {
		if !strings.Contains(strings.Join(m.Options, ","), "ro") {
			t.Errorf("mount %s -> %s is writable", m.Source, m.Destination)
		}
	}
	settable := map[string]bool{}
	for _, e := range cfg.Env {
		if len(e.Settable) == 1 && e.Settable[0] == "value" {
			settable[e.Name] = true
		}
	}
	for _, name := range []string{"LOG_LEVEL", "SCOPE", "DOCKER_HOST", "DEFAULT_ADDRESS_POOLS", "POOL_RESERVATION_TIMEOUT", "METRICS_LISTEN"} {
		if !settable[name] {
			t.Errorf("env %s is not settable", name)
		}
	}
}

// --profile writes pprof profiles of the whole run when stop is called:
// off by default, PROFILE_DIR from the environment, the flag wins.
func TestProfiles(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if c, err := parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.Profile != "" {
		t.Fatalf("default: %q %v, want off", c.Profile, err)
	}
	env["PROFILE_DIR"] = "/tmp/a"
	if c, err := parseServe([]string{"--profile", "/tmp/b"}, getenv, &bytes.Buffer{}); err != nil || c.Profile != "/tmp/b" {
		t.Fatalf("the flag must win: %q %v", c.Profile, err)
	}
	dir := filepath.Join(t.TempDir(), "prof")
	stop, err := startProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cpu", "block", "mutex", "heap"} {
		if fi, err := os.Stat(filepath.Join(dir, name+".pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("%s profile: %v", name, err)
		}
	}
}

// TestParseServeDockerHost: a --docker-host (or DOCKER_HOST) without an
// address is refused at start, naming the value and the fix, not found
// out at the first conflict check.
func TestParseServeDockerHost(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	for _, ok := range []string{"unix:///run/docker.sock", "tcp://10.0.0.1:2375"} {
		if c, err := parseServe([]string{"--docker-host", ok}, getenv, &bytes.Buffer{}); err != nil || c.DockerHost != ok {
			t.Errorf("--docker-host %s: %q %v", ok, c.DockerHost, err)
		}
	}
	for bad, fix := range map[string]string{"unix://": "unix:///var/run/docker.sock", "tcp://": "tcp://HOST:PORT", "tcp://10.0.0.1": "tcp://HOST:PORT", "unix://run/docker.sock": "unix:///run/docker.sock"} {
		_, err := parseServe([]string{"--docker-host", bad}, getenv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) || !strings.Contains(err.Error(), fix) {
			t.Errorf("--docker-host %s: %v, want an error naming it and %s", bad, err, fix)
		}
		env["DOCKER_HOST"] = bad
		if _, err := parseServe(nil, getenv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("DOCKER_HOST=%s: %v", bad, err)
		}
		delete(env, "DOCKER_HOST")
	}
}

// underlay mac: usage errors exit 2 saying what is missing; a parent the
// host does not have exits 1 naming it.
func TestMACCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mac", "web"}, 2, "--parent is missing"},
		{[]string{"mac", "--parent", "eth0"}, 2, "container name is missing"},
		{[]string{"mac", "--parent", "eth0", "a", "b"}, 2, "give one container name (got 2: a b)"},
		{[]string{"mac", "--parent", "eth0", "--vlan", "5000", "web"}, 2, "--vlan 5000 is not a VLAN ID"},
		{[]string{"mac", "--parent", "nosuchlink0", "web"}, 1, "nosuchlink0"},
		{[]string{"mac", "--parent", "nosuch0.10", "web"}, 1, "give --parent nosuch0 --vlan 10"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("underlay %v: exit %d, stderr %q, stdout %q; want exit %d mentioning %q", tc.args, code, errOut.String(), out.String(), tc.code, tc.want)
		}
	}
}

func TestDoctorLANCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--lan"}, "flag needs an argument"},
		{[]string{"doctor", "--lan", ""}, "--lan needs the parent link"},
		{[]string{"doctor", "--lan", "eth0", "extra"}, `unexpected argument "extra"`},
		{[]string{"doctor", "--lan", "eth0", "-o", "bogus=1"}, `unknown driver option "bogus"`},
		{[]string{"doctor", "--lan", "eth0", "-o", "type"}, `-o "type" is not KEY=VALUE`},
		{[]string{"doctor", "--lan", "eth0", "-o", "type=ipvlan", "-o", "type=macvlan"}, "-o type is given twice"},
		{[]string{"doctor", "--lan", "eth0", "-o", "type=bridge"}, `type "bridge" is not a link type`},
		{[]string{"doctor", "--lan", "eth0", "-o", "parent=eth1"}, "-o parent=eth1 is not the parent eth0"},
		{[]string{"doctor", "--lan", "eth0", "--network", "lan", "-o", "dhcp=true"}, "give one"},
		{[]string{"doctor", "--lan", "eth0", "--timeout", "0s"}, "--timeout 0s is not a duration"},
		{[]string{"doctor", "--lan", "eth0", "--docker-host", "unix://"}, "unix://"},
		{[]string{"doctor", "--lan", "eth0", "--network", "lan", "--socket", "/nonexistent/underlay.sock"}, "--network lan needs the daemon"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("underlay %q: exit %d, stderr %q, stdout %q; want exit 2 mentioning %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
	}
}

// A parent that does not exist is a problem the checks name (exit 1),
// not a failure to run; nothing is sent.
func TestDoctorLANMissingParent(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"doctor", "--lan", "nosuchlink0", "--json", "--timeout", "1s"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, stderr %q, stdout %q; want 1", code, errOut.String(), out.String())
	}
	var r struct {
		Parent string
		Checks []struct{ Check, Verdict, Evidence, Fix string }
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	verdicts := map[string]string{}
	for _, c := range r.Checks {
		verdicts[c.Check] = c.Verdict
	}
	if r.Parent != "nosuchlink0" || verdicts["parent"] != "problem" || verdicts["new-mac"] != "unknown" || verdicts["dhcp"] != "unknown" {
		t.Fatalf("report %s", out.String())
	}
}
