package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/dockerapi"
	"github.com/underlay-net/underlay/driver"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The LAN preflight's command (fixed: tools call it like this):
//
//	underlay doctor --lan PARENT [--network NAME|ID] [-o KEY=VALUE]... [--timeout DURATION] [--json]
//	                [--socket PATH] [--docker-host unix://PATH]
//
// Exit control.ExitHealthy when no check says problem, ExitFindings when
// one does, ExitCannot when it cannot run; unknown never changes the code.

// LANReport is `underlay doctor --lan --json`'s document.
type LANReport struct {
	Parent string `json:"parent"`
	// Network is the network whose options were used, if --network.
	Network string          `json:"network,omitempty"`
	Checks  []lancheck.Item `json:"checks"`
}

// lanMark marks the throwaway child the command makes (in a namespace of
// its own, which no daemon reads).
var lanMark = kernel.Mark("doctor-lan")

// hasLAN reports whether doctor's arguments ask for the LAN checks.
func hasLAN(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "lan" {
			return true
		}
	}
	return false
}

type lanOptions struct {
	parent, network    string
	opts               map[string]string
	timeout            time.Duration
	json               bool
	socket, dockerHost string
}

// optsFlag collects repeated -o KEY=VALUE.
type optsFlag map[string]string

func (f optsFlag) String() string { return "" }

func (f optsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("-o %q is not KEY=VALUE: write for example -o type=ipvlan", v)
	}
	if old, dup := f[k]; dup && old != val {
		return fmt.Errorf("-o %s is given twice (%q and %q): give it once", k, old, val)
	}
	f[k] = val
	return nil
}

// lanFlags is the flag set of `underlay doctor --lan`, defined into o,
// its defaults read through getenv: the parser's and the manual page's.
func lanFlags(o *lanOptions, getenv func(string) string) *flag.FlagSet {
	if o.opts == nil {
		o.opts = map[string]string{}
	}
	fs := flag.NewFlagSet("underlay doctor --lan", flag.ContinueOnError)
	fs.StringVar(&o.parent, "lan", "", "the parent link whose LAN is checked (a VLAN as LINK.VID)")
	fs.StringVar(&o.network, "network", "", "take the options of this underlay network (name or ID)")
	fs.Var(optsFlag(o.opts), "o", "a driver option of docker network create, KEY=VALUE (repeatable)")
	fs.DurationVar(&o.timeout, "timeout", lancheck.DefaultBudget, "how long the whole run may take")
	fs.BoolVar(&o.json, "json", false, "print one JSON document")
	fs.StringVar(&o.socket, "socket", "", "the daemon's socket, for --network (default "+control.DefaultSocket+", else the one managed plugin's "+control.PluginSockets+")")
	def := getenv("DOCKER_HOST")
	if def == "" {
		def = "unix:///var/run/docker.sock"
	}
	fs.StringVar(&o.dockerHost, "docker-host", def, "Docker API for --network's name (env DOCKER_HOST)")
	return fs
}

func parseLAN(args []string, stderr io.Writer) (lanOptions, error) {
	var o lanOptions
	fs := lanFlags(&o, os.Getenv)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q: underlay doctor --lan takes PARENT as --lan's value and the rest as flags", fs.Arg(0))
	case o.parent == "":
		return o, errors.New("--lan needs the parent link: underlay doctor --lan eth0")
	case o.timeout <= 0 || o.timeout > 5*time.Minute:
		return o, fmt.Errorf("--timeout %s is not a duration from 1ms to 5m: use for example --timeout 5s", o.timeout)
	case o.network != "" && len(o.opts) > 0:
		return o, errors.New("--network and -o both give the network's options: give one")
	}
	return o, control.CheckDockerHost(o.dockerHost)
}

// runLAN runs `underlay doctor --lan` and returns its exit code.
func runLAN(args []string, stdout, stderr io.Writer) int {
	o, err := parseLAN(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "underlay doctor --lan:", err)
		return control.ExitCannot
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	n, label, err := o.lanNetwork(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "underlay doctor --lan:", err)
		return control.ExitCannot
	}
	if err := canSend(); err != nil {
		fmt.Fprintln(stderr, "underlay doctor --lan:", err)
		return control.ExitCannot
	}
	env := lancheck.Env{Kernel: netlinkutil.New(), Netns: netns.None(), Mark: lanMark, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	report := LANReport{Parent: o.parent, Network: label, Checks: lancheck.Run(ctx, env, n)}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintln(stderr, "underlay doctor --lan:", err)
			return control.ExitCannot
		}
	} else {
		printLAN(stdout, report)
	}
	if len(lancheck.Problems(report.Checks)) > 0 {
		return control.ExitFindings
	}
	return control.ExitHealthy
}

// lanNetwork is the network the checks judge by: --network's (from the
// daemon's state) or -o's.
func (o lanOptions) lanNetwork(ctx context.Context) (lancheck.Network, string, error) {
	if o.network == "" {
		n, err := driver.LANOptions(o.parent, o.opts)
		return n, "", err
	}
	socket, err := control.FindSocket(o.socket, control.DefaultSocket, control.PluginSockets)
	if err != nil {
		return lancheck.Network{}, "", fmt.Errorf("--network %s needs the daemon: %w", o.network, err)
	}
	st, err := control.NewClient(socket).State(ctx)
	if err != nil {
		return lancheck.Network{}, "", fmt.Errorf("--network %s: %w", o.network, err)
	}
	rec, err := o.findNetwork(ctx, st.Networks)
	if err != nil {
		return lancheck.Network{}, "", err
	}
	if rec.Parent != o.parent && rec.Options["parent"] != o.parent {
		return lancheck.Network{}, "", fmt.Errorf("network %s is on parent %s, not %s: give --lan %s, or drop --network and give its options with -o", o.network, rec.Parent, o.parent, rec.Parent)
	}
	return driver.LANNetwork(rec), rec.ID, nil
}

// findNetwork finds --network among the daemon's networks: by ID, by a
// unique ID prefix, or by Docker's name for it.
func (o lanOptions) findNetwork(ctx context.Context, nets []record.Network) (record.Network, error) {
	var byPrefix []record.Network
	for _, n := range nets {
		if n.ID == o.network {
			return n, nil
		}
		if strings.HasPrefix(n.ID, o.network) {
			byPrefix = append(byPrefix, n)
		}
	}
	if len(byPrefix) == 1 {
		return byPrefix[0], nil
	}
	api, err := dockerapi.New(o.dockerHost, 5*time.Second)
	if err == nil {
		var ds []dockerapi.Network
		if ds, err = api.Networks(ctx); err == nil {
			for _, d := range ds {
				if d.Name != o.network {
					continue
				}
				for _, n := range nets {
					if n.ID == d.ID {
						return n, nil
					}
				}
				return record.Network{}, fmt.Errorf("network %s (%s) is not an underlay network of this daemon: give its parent with --lan and its options with -o", o.network, d.ID)
			}
		}
	}
	if len(byPrefix) > 1 {
		return record.Network{}, fmt.Errorf("--network %s matches %d networks' IDs: give more of the ID, or the name", o.network, len(byPrefix))
	}
	if err != nil {
		return record.Network{}, fmt.Errorf("no underlay network has ID %s, and Docker could not be asked for the name: %w", o.network, err)
	}
	return record.Network{}, fmt.Errorf("no underlay network is named %s or has that ID (underlay ls lists them)", o.network)
}

// printLAN prints the checks for a person: one block per item.
func printLAN(w io.Writer, r LANReport) {
	fmt.Fprintf(w, "LAN checks on %s", r.Parent)
	if r.Network != "" {
		fmt.Fprintf(w, " for network %s", r.Network)
	}
	fmt.Fprintln(w)
	for _, it := range r.Checks {
		name := string(it.Check)
		if it.Family != "" {
			name += " (" + it.Family + ")"
		}
		fmt.Fprintf(w, "%-8s %s: %s\n", strings.ToUpper(string(it.Verdict)), name, it.Evidence)
		if it.Fix != "" && it.Verdict != lancheck.OK {
			fmt.Fprintf(w, "         fix: %s\n", it.Fix)
		}
	}
	problems := len(lancheck.Problems(r.Checks))
	switch problems {
	case 0:
		fmt.Fprintln(w, "no problem found")
	default:
		fmt.Fprintf(w, "%d problem(s) found\n", problems)
	}
}

// canSend checks that this process may open packet sockets: without
// them every LAN check would say unknown and the run prove nothing.
func canSend() error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open a packet socket (%w): the LAN checks need CAP_NET_RAW and CAP_NET_ADMIN: run it as root (sudo underlay doctor --lan ...)", err)
	}
	return unix.Close(fd)
}
