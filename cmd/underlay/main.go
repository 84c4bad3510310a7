// Command underlay is a Docker network plugin that gives containers
// macvlan and ipvlan interfaces on the host's network.
//
//	underlay serve [flags]                 the daemon
//	underlay ls | doctor [--lan] | mac     ask the daemon or the host
//	underlay version
//
// commands.go describes every command line; the usage text, the manual
// pages (man/) and the bash completion (completion/) are generated from
// the parsers' own flag sets (man_test.go). Flags that read an
// environment variable (the managed plugin's `docker plugin set`) name it
// in their usage; flags win.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/ipam"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	switch args[0] {
	case "version", "--version":
		fmt.Fprintln(stdout, "underlay", versionString())
		return 0
	case "serve":
		cfg, err := parseServe(args[1:], os.Getenv, stderr)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(stderr, "underlay:", err)
			return 2
		}
		if err := serve(cfg, stderr); err != nil {
			fmt.Fprintln(stderr, "underlay:", err)
			return 1
		}
		return 0
	case "ls":
		return control.RunLs(args[1:], stdout, stderr)
	case "doctor":
		if hasLAN(args[1:]) {
			return runLAN(args[1:], stdout, stderr)
		}
		return control.RunDoctor(args[1:], stdout, stderr)
	case "mac":
		return runMAC(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText())
		return 0
	}
	fmt.Fprintf(stderr, "underlay: unknown command %q\n%s", args[0], usageText())
	return 2
}

func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}

// serveConfig is the resolved configuration of `underlay serve`.
type serveConfig struct {
	Socket     string
	State      string
	LogLevel   string
	DockerHost string
	Scope      string
	// Bases are the IPAM's default address pools; nil means the defaults.
	Bases []ipam.Base
	// Reservation is how long an unconfirmed auto pool stays reserved.
	Reservation time.Duration
	// ResolvConf is read for the nameservers auto pools avoid.
	ResolvConf string
	// MetricsListen is the TCP address /metrics is also served on; ""
	// serves it on the plugin socket only.
	MetricsListen string
	// Profile, when set, is the directory CPU, block, mutex and heap
	// profiles of the whole run are written to at exit.
	Profile string
	// ContainerRepairWait is how long containers' interfaces wait for a
	// deleted parent link to come back; negative: no container repair.
	ContainerRepairWait time.Duration
	// SandboxDir, when set, is where containers' namespace files are as
	// this process sees them (the repair plugin's mount of dockerd's
	// netns directory): a SandboxKey's file name is opened there.
	SandboxDir string
}

// basesFlag collects repeated --default-address-pool values.
type basesFlag struct {
	bases *[]ipam.Base
	set   bool
}

func (f *basesFlag) String() string { return "" }

func (f *basesFlag) Set(v string) error {
	b, err := ipam.ParseBase(v)
	if err != nil {
		return err
	}
	if !f.set {
		*f.bases, f.set = nil, true // flags replace the environment's list
	}
	*f.bases = append(*f.bases, b)
	return nil
}

// serveStrings are the serve flags parsed after the flag set: durations
// whose flag and environment spellings are checked together.
type serveStrings struct {
	reservation, repairWait string
}

// serveFlags is the flag set of `underlay serve`, defined into c and raw,
// its defaults read through getenv: the parser's and the manual page's.
// The flag set is whole even with an error (a DEFAULT_ADDRESS_POOLS that
// does not parse).
func serveFlags(c *serveConfig, raw *serveStrings, getenv func(string) string) (*flag.FlagSet, error) {
	envOr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	var envErr error
	fs := flag.NewFlagSet("underlay serve", flag.ContinueOnError)
	fs.StringVar(&c.Socket, "socket", "/run/docker/plugins/underlay.sock", "unix socket to serve the plugin API on")
	fs.StringVar(&c.State, "state", envOr("STATE", "/var/lib/underlay/underlay.db"), "state file (env STATE)")
	fs.StringVar(&c.LogLevel, "log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL)")
	fs.StringVar(&c.DockerHost, "docker-host", envOr("DOCKER_HOST", "unix:///var/run/docker.sock"), "Docker API asked whether conflicting networks still exist (env DOCKER_HOST)")
	fs.StringVar(&c.Scope, "scope", envOr("SCOPE", "local"), "driver scope: local or global (env SCOPE)")
	if env := getenv("DEFAULT_ADDRESS_POOLS"); env != "" {
		bases, err := ipam.ParseBases(env)
		if err != nil {
			envErr = fmt.Errorf("DEFAULT_ADDRESS_POOLS: %w", err)
		}
		c.Bases = bases
	}
	fs.Var(&basesFlag{bases: &c.Bases}, "default-address-pool", "base=CIDR,size=N: a range automatic IPAM pools are cut from (repeatable; env DEFAULT_ADDRESS_POOLS, entries separated by spaces; default base=172.16.0.0/12,size=24)")
	raw.reservation = envOr("POOL_RESERVATION_TIMEOUT", "60s")
	fs.StringVar(&raw.reservation, "pool-reservation-timeout", raw.reservation, "how long an automatic pool Docker has not used yet stays reserved (env POOL_RESERVATION_TIMEOUT)")
	fs.StringVar(&c.ResolvConf, "resolv-conf", "/etc/resolv.conf", "resolv.conf whose nameservers automatic pools avoid")
	fs.StringVar(&c.MetricsListen, "metrics-listen", getenv("METRICS_LISTEN"), "HOST:PORT to serve /metrics on over TCP too, unauthenticated: bind it to 127.0.0.1 or a management address (env METRICS_LISTEN; default off, /metrics is on the plugin socket)")
	fs.StringVar(&c.Profile, "profile", getenv("PROFILE_DIR"), "directory to write CPU, block, mutex and heap profiles (pprof) of the whole run to when the daemon stops; off by default, costs some CPU (env PROFILE_DIR)")
	fs.StringVar(&c.SandboxDir, "sandbox-dir", getenv("SANDBOX_DIR"), "directory where this process sees the files of containers' network namespaces, when not at the path dockerd names (the repair plugin's mount of dockerd's <exec-root>/netns); default: the path dockerd names (env SANDBOX_DIR)")
	raw.repairWait = envOr("CONTAINER_REPAIR_WAIT", "5m")
	fs.StringVar(&raw.repairWait, "container-repair-wait", raw.repairWait, "how long running containers whose parent link was deleted wait for it to come back, to get their interface made again; 0 turns that repair off (env CONTAINER_REPAIR_WAIT)")
	return fs, envErr
}

// parseServe reads the serve flags over defaults taken from the
// environment.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	var raw serveStrings
	fs, err := serveFlags(&c, &raw, getenv)
	if err != nil {
		return c, err
	}
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	rw, err := time.ParseDuration(raw.repairWait)
	if err != nil || rw < 0 {
		return c, fmt.Errorf("--container-repair-wait %q is not a duration: use for example 5m, 30s, or 0 to turn the container repair off", raw.repairWait)
	}
	c.ContainerRepairWait = rw
	if rw == 0 {
		c.ContainerRepairWait = -1
	}
	d, err := time.ParseDuration(raw.reservation)
	if err != nil || d <= 0 {
		return c, fmt.Errorf("--pool-reservation-timeout %q is not a positive duration: use for example 60s or 5m", raw.reservation)
	}
	c.Reservation = d
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), usageText())
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return c, fmt.Errorf("--log-level %q is not valid: use debug, info, warn or error", c.LogLevel)
	}
	if c.Scope != "local" && c.Scope != "global" {
		return c, fmt.Errorf("--scope %q is not valid: use local or global", c.Scope)
	}
	if err := control.CheckDockerHost(c.DockerHost); err != nil {
		return c, err
	}
	if c.MetricsListen != "" {
		_, port, err := net.SplitHostPort(c.MetricsListen)
		if _, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil {
			return c, fmt.Errorf("--metrics-listen %q is not a TCP address: use HOST:PORT, for example 127.0.0.1:9323", c.MetricsListen)
		}
	}
	if c.Socket == "" || c.State == "" {
		return c, errors.New("--socket and --state must not be empty")
	}
	return c, nil
}
