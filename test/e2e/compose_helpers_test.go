//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Docker Compose as users run it: `docker compose` (the CLI plugin from
// E2E_COMPOSE, installed into the suite's CLI config) against the suite's
// engine. The Makefile's test-e2e and test-e2e-current pass E2E_COMPOSE;
// a test that needs Compose fails without it (a suite that silently skips
// Compose would prove nothing about it).

// composeEnv names the docker-compose binary the suite installs as the
// CLI plugin.
const composeEnv = "E2E_COMPOSE"

// composeOnce installs the plugin once per run (the suite's CLI config
// lives as long as the suite).
var composeOnce struct {
	sync.Mutex
	version string
}

// needCompose installs E2E_COMPOSE as the CLI plugin
// <DOCKER_CONFIG>/cli-plugins/docker-compose of the suite's CLI config
// (cliEnv) and fails the test when E2E_COMPOSE is unset or `docker compose
// version` does not answer. It returns compose's version.
func (e *env) needCompose(t *testing.T) string {
	t.Helper()
	composeOnce.Lock()
	defer composeOnce.Unlock()
	if composeOnce.version != "" {
		return composeOnce.version
	}
	bin := os.Getenv(composeEnv)
	if bin == "" {
		t.Fatalf("%s is unset: this test drives `docker compose` and needs the path of a docker-compose binary; run it via `make test-e2e` or `make test-e2e-current`, which set %s (or set %s=/path/to/docker-compose yourself)", composeEnv, composeEnv, composeEnv)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatalf("%s=%s: %v", composeEnv, bin, err)
	}
	if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s=%s is not an executable file (%v): point it at a docker-compose binary (make test-e2e builds one)", composeEnv, bin, err)
	}
	dir := filepath.Join(e.cliConfig(), "cli-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "docker-compose")
	_ = os.Remove(link)
	if err := os.Symlink(abs, link); err != nil {
		t.Fatalf("install %s as the CLI plugin %s: %v", abs, link, err)
	}
	v, err := e.docker("compose", "version", "--short")
	if err != nil {
		t.Fatalf("`docker compose version` with %s=%s installed as %s: %v", composeEnv, bin, link, err)
	}
	composeOnce.version = v
	t.Logf("docker compose %s (%s)", v, abs)
	return v
}

// cliConfig is the suite's DOCKER_CONFIG (as cliEnv sets it).
func (e *env) cliConfig() string {
	for _, kv := range e.cliEnv() {
		if v, ok := strings.CutPrefix(kv, "DOCKER_CONFIG="); ok {
			return v
		}
	}
	return filepath.Join(dataDir, "cli")
}

// composeProject writes yaml as a compose file of its own (in the test's
// temp dir), installs Compose (needCompose), and takes the project down
// at cleanup (containers of every profile, networks, whatever a failed
// test left). It
// returns the file's path, for compose and tryCompose.
func (e *env) composeProject(t *testing.T, project, yaml string) string {
	t.Helper()
	e.needCompose(t)
	file := filepath.Join(t.TempDir(), project+".yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := e.tryCompose(project, file, "--profile", "*", "down", "--remove-orphans", "-t", "1"); err != nil {
			t.Errorf("cleanup: %v", err)
		} else if t.Failed() {
			t.Logf("cleanup: compose down:\n%s", out)
		}
	})
	return file
}

// compose runs `docker compose -p PROJECT -f FILE ARGS` and fails the test
// on error; it returns the trimmed combined output.
func (e *env) compose(t *testing.T, project, file string, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := e.tryCompose(project, file, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("docker compose %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

// tryCompose is compose returning the error (which holds the output).
// Progress goes out plain, without colours.
func (e *env) tryCompose(project, file string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append([]string{"compose", "--progress", "plain", "--ansi", "never", "-p", project, "-f", file}, args...)
	cmd := exec.CommandContext(ctx, dockerCLI, argv...)
	cmd.Env = e.cliEnv()
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("docker %s: %w: %s", strings.Join(argv, " "), err, s)
	}
	return s, nil
}

// composeContainer is the name Compose gives a service's (first)
// container: PROJECT-SERVICE-1.
func composeContainer(project, service string) string { return project + "-" + service + "-1" }

// composeNetwork is the name Compose gives a network of the file:
// PROJECT_NETWORK.
func composeNetwork(project, network string) string { return project + "_" + network }

// endpoint is an interface's IPv4 address and MAC.
type endpoint struct {
	addr netip.Prefix // the IPv4 address with its prefix length
	mac  net.HardwareAddr
}

func (p endpoint) String() string { return fmt.Sprintf("%s %s", p.addr, p.mac) }

// dockerView is a container's IPv4 address (with the prefix length) and
// MAC on a network as docker inspect shows them.
func (e *env) dockerView(name, netName string) (endpoint, error) {
	out, err := e.docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", name)
	if err != nil {
		return endpoint{}, err
	}
	var nets map[string]struct {
		MacAddress, IPAddress string
		IPPrefixLen           int
	}
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return endpoint{}, fmt.Errorf("docker inspect %s: %w: %s", name, err, out)
	}
	n, ok := nets[netName]
	if !ok {
		return endpoint{}, fmt.Errorf("docker inspect %s: not on network %s: %s", name, netName, out)
	}
	addr, err := netip.ParseAddr(n.IPAddress)
	if err != nil {
		return endpoint{}, fmt.Errorf("docker inspect %s: address %q on %s: %v", name, n.IPAddress, netName, err)
	}
	mac, err := net.ParseMAC(n.MacAddress)
	if err != nil {
		return endpoint{}, fmt.Errorf("docker inspect %s: MAC %q on %s: %v", name, n.MacAddress, netName, err)
	}
	return endpoint{addr: netip.PrefixFrom(addr, n.IPPrefixLen), mac: mac}, nil
}

// ifaceView is a container's interface ifname as the container sees it:
// its one IPv4 address and its MAC.
func (e *env) ifaceView(name, ifname string) (endpoint, error) {
	out, err := e.exec(name, "sh", "-c", "cat /sys/class/net/"+ifname+"/address && ip -4 -o addr show dev "+ifname)
	if err != nil {
		return endpoint{}, err
	}
	mac, rest, _ := strings.Cut(out, "\n")
	m, err := net.ParseMAC(strings.TrimSpace(mac))
	if err != nil {
		return endpoint{}, fmt.Errorf("%s: MAC of %s %q: %v", name, ifname, mac, err)
	}
	a := inetRE.FindAllStringSubmatch(rest, -1)
	if len(a) != 1 {
		return endpoint{}, fmt.Errorf("%s: %s has %d IPv4 addresses: %q", name, ifname, len(a), rest)
	}
	p, err := netip.ParsePrefix(a[0][1])
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{addr: p, mac: m}, nil
}

// seen is a container's endpoint on a network as both Docker and the
// container see it, once they agree.
func (e *env) seen(name, netName, ifname string) (endpoint, error) {
	d, err := e.dockerView(name, netName)
	if err != nil {
		return endpoint{}, err
	}
	c, err := e.ifaceView(name, ifname)
	if err != nil {
		return endpoint{}, err
	}
	if d.addr != c.addr || d.mac.String() != c.mac.String() {
		return endpoint{}, fmt.Errorf("%s: docker inspect shows %s on %s, the container sees %s on %s", name, d, netName, c, ifname)
	}
	return c, nil
}

// waitEndpoint waits until Docker and the container agree on the
// container's endpoint on netName (interface ifname inside) and ok holds
// for it; it returns the endpoint.
func (e *env) waitEndpoint(t *testing.T, name, netName, ifname string, ok func(endpoint) error) endpoint {
	t.Helper()
	var got endpoint
	eventually(t, 30*time.Second, fmt.Sprintf("%s on %s (%s inside)", name, netName, ifname), func() error {
		v, err := e.seen(name, netName, ifname)
		if err != nil {
			return err
		}
		if err := ok(v); err != nil {
			return fmt.Errorf("%s: %s on %s: %w", name, v, ifname, err)
		}
		got = v
		return nil
	})
	return got
}

// networkGone waits until docker network ls no longer lists name.
func (e *env) networkGone(t *testing.T, name string) {
	t.Helper()
	eventually(t, 15*time.Second, "network "+name+" gone from docker network ls", func() error {
		out, err := e.docker("network", "ls", "--format", "{{.Name}}")
		if err != nil {
			return err
		}
		for _, n := range strings.Fields(out) {
			if n == name {
				return fmt.Errorf("docker network ls still lists %s", name)
			}
		}
		return nil
	})
}
