//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The engine the suite drives. By default Debian 12's engine 20.10
// (dockerd from PATH, docker.io: `make test-e2e`); E2E_DOCKERD names
// another dockerd and E2E_RUNC the runc it runs containers and the managed
// plugin with (`make test-e2e-current`: the current engine of
// engines/current.env, built by `make engine-current`). E2E_ENGINE is a
// name for it in the suite's output. Every engine of the suite (the
// suite's own and the multi-node harness's) is started with engineArgv.
//
// The suite does not care which engine it drives, except for the
// differences below, each a method of engineInfo that the tests ask:
// nothing is skipped silently on either engine.
var (
	engineDockerd = envOr("E2E_DOCKERD", "dockerd")
	engineRunc    = os.Getenv("E2E_RUNC")
	engineLabel   = envOr("E2E_ENGINE", "20.10")
)

// e2eRuntime is the name of E2E_RUNC's runtime in the engine (`runc` is
// reserved for the engine's own).
const e2eRuntime = "e2e-runc"

// cli28 is the 28.x client: --ipv4=false needs it (the 20.10 client,
// dockerCLI, has no such flag).
const cli28 = "/usr/local/bin/docker"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// engineArgv is the start of every engine's command line: the dockerd,
// and E2E_RUNC as its default runtime (for containers and managed
// plugins alike).
func engineArgv() []string {
	argv := []string{engineDockerd}
	if engineRunc != "" {
		argv = append(argv, "--add-runtime", e2eRuntime+"="+engineRunc, "--default-runtime", e2eRuntime)
	}
	return argv
}

// checkEngine fails unless E2E_DOCKERD and E2E_RUNC name programs that
// exist, before anything is started.
func checkEngine() error {
	if _, err := exec.LookPath(engineDockerd); err != nil {
		return fmt.Errorf("engine %s: E2E_DOCKERD=%s: %v (the current engine is built by `make engine-current`)", engineLabel, engineDockerd, err)
	}
	if engineRunc != "" {
		if _, err := exec.LookPath(engineRunc); err != nil {
			return fmt.Errorf("engine %s: E2E_RUNC=%s: %v (the current engine is built by `make engine-current`)", engineLabel, engineRunc, err)
		}
	}
	return nil
}

// engineInfo is what the running engine says of itself.
type engineInfo struct {
	Version    string // the server's version (20.10.24+dfsg1, v2.0.0-beta.24)
	APIVersion string // its API version (1.41, 1.56)
	api        [2]int
}

// engine is the suite's engine once it runs (set by setup).
var engine engineInfo

// askEngine asks the running suite engine for its version.
func (e *env) askEngine() error {
	out, err := e.docker("version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}")
	if err != nil {
		return fmt.Errorf("engine %s: docker version: %w", engineLabel, err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return fmt.Errorf("engine %s: docker version: %q", engineLabel, out)
	}
	engine.Version, engine.APIVersion = f[0], f[1]
	maj, min, ok := strings.Cut(engine.APIVersion, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("engine %s: API version %q", engineLabel, engine.APIVersion)
	}
	engine.api = [2]int{a, b}
	return nil
}

// String names the engine in the suite's output and in every failure.
func (g engineInfo) String() string {
	s := fmt.Sprintf("engine %s: dockerd %s (API %s, %s", engineLabel, g.Version, g.APIVersion, engineDockerd)
	if engineRunc != "" {
		s += ", runc " + engineRunc
	} else {
		s += ", runc from PATH"
	}
	return s + ")"
}

func (g engineInfo) apiAtLeast(major, minor int) bool {
	return g.api[0] > major || g.api[0] == major && g.api[1] >= minor
}

// The documented differences between the engines (docs/development.md, "Engines"):
// facts of the engines, seen at the plugin protocol (FIELD-NOTES, "Current
// engines"). 20.10 is API 1.41, 28.5.2 API 1.51, the current engine
// (moby v2.0.0-beta.24) API 1.56.

// honoursIfname: the engine gives the container's interface the name the
// driver answers in Join (InterfaceName.DstName), so
// com.docker.network.endpoint.ifname works for remote drivers. 20.10 and
// 28.5.2 ignore DstName: the interface is eth0 there.
func (g engineInfo) honoursIfname() bool { return g.apiAtLeast(1, 52) }

// ipv4Optional: the engine knows --ipv4=false (EnableIPv4, API 1.48,
// engine 28.0; an older API version's request has it dropped): IPv6-only
// networks. 20.10 gives every network IPv4.
func (g engineInfo) ipv4Optional() bool { return g.apiAtLeast(1, 48) }

// asksGwAlloc: the engine asks a driver whose capabilities say
// GwAllocChecker whether to reserve a gateway address
// (/NetworkDriver.GwAllocCheck); seen on the current engine, not sent by
// 20.10, which reserves a gateway address on every network. Engines
// between 20.10 and the current one are not run here: the threshold is
// the one of honoursIfname, the newest fact checked.
func (g engineInfo) asksGwAlloc() bool { return g.apiAtLeast(1, 52) }

// announces: the engine sends gratuitous ARP requests and unsolicited
// Neighbour Advertisements for every driver's endpoints (advertise_addr_*,
// engine 28.0, API 1.48, seen on the current engine) and tells the driver
// so with com.docker.network.enable_ipv4 in CreateNetwork, which underlay
// takes as the sign to send none itself; 20.10 sends nothing, underlay
// does.
func (g engineInfo) announces() bool { return g.apiAtLeast(1, 48) }

// sendsEndpointName: the engine sends the endpoint's name with its
// IpamDriver.RequestAddress (com.docker.network.endpoint.name), which
// underlay's IPAM keeps addresses by; seen on the current engine, not
// sent by 20.10. Same threshold as honoursIfname.
func (g engineInfo) sendsEndpointName() bool { return g.apiAtLeast(1, 52) }

// showsPickedGateway: docker network inspect shows the gateway address
// Docker picked for a --subnet given without --gateway (the current
// engine); 20.10 shows the IPAM config as the user gave it, without one,
// even where it reserved one. Same threshold as honoursIfname.
func (g engineInfo) showsPickedGateway() bool { return g.apiAtLeast(1, 52) }

// logEngineOnFailure names the engine at the end of a failed test's
// output.
func logEngineOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("this failure is on %s", engine)
		}
	})
}
