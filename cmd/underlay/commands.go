package main

import (
	"flag"
	"sort"
	"strings"

	"github.com/underlay-net/underlay/control"
)

// command describes one command line of underlay for the usage text, the
// manual pages and the shell completion (man_test.go renders and checks
// those): its flags are the parser's own flag set, so none of them can
// drift from what the command accepts.
type command struct {
	// name is what follows "underlay": "serve", "doctor --lan".
	name string
	// page is the manual page it is documented in: "underlay-serve".
	page string
	// summary is one line: the page's NAME and underlay(8)'s list.
	summary string
	// description is the page's DESCRIPTION, one paragraph a string.
	description []string
	// flags returns the parser's flag set, its defaults read through
	// getenv; nil: the command takes no flags.
	flags func(getenv func(string) string) *flag.FlagSet
	// args describes the flags that take a value, by name.
	args map[string]flagArg
	// operand follows the flags in the synopsis: "NAME".
	operand string
	// exits are the exit statuses the command defines.
	exits []exitStatus
	// files are the files it reads or writes by default.
	files []string
}

// flagArg describes a flag's value.
type flagArg struct {
	// placeholder names the value in the synopsis: "PATH"; "" with values
	// set: the values joined by "|".
	placeholder string
	// values are all the values it takes, offered by the completion.
	values []string
	// complete is what else completes the value: "file" (file names),
	// "link" (the host's network interfaces) or "" (nothing).
	complete string
	// required flags come first in the synopsis, without brackets.
	required bool
	// repeat: the flag may be given more than once.
	repeat bool
}

// exitStatus is an exit code and when a command exits with it.
type exitStatus struct {
	code int
	when string
}

// noEnv is the environment the documented defaults are read with.
func noEnv(string) string { return "" }

// Default files.
const (
	stateFile = "/var/lib/underlay/underlay.db"
)

var (
	dockerHostArg = flagArg{placeholder: "unix://PATH"}
	socketArg     = flagArg{placeholder: "PATH", complete: "file"}
)

func serveCommand() command {
	return command{
		name:    "serve",
		page:    "underlay-serve",
		summary: "run the underlay Docker network plugin daemon",
		description: []string{
			"underlay serve runs the Docker network and IPAM plugin: it serves the plugin API on a unix socket, makes the macvlan and ipvlan links of Docker's networks and endpoints, and keeps what it made in a state file, so that a restart (of underlay, of Docker or of the host) finds its networks again.",
			"Installed by the Debian package, it runs as the systemd unit underlay.service (a legacy plugin: Docker finds its socket in /run/docker/plugins and the driver is used as docker network create -d underlay). As a managed plugin, docker plugin set sets the environment variables below.",
			"SIGTERM or SIGINT stops it: requests in flight finish, the state file is closed and the socket removed. Every flag that reads an environment variable takes its default from it; the flag wins.",
		},
		flags: func(getenv func(string) string) *flag.FlagSet {
			// The flags are whole whatever the environment says; only the
			// parser needs the error of a bad DEFAULT_ADDRESS_POOLS.
			fs, _ := serveFlags(&serveConfig{}, &serveStrings{}, getenv)
			return fs
		},
		args: map[string]flagArg{
			"socket":                   socketArg,
			"state":                    {placeholder: "PATH", complete: "file"},
			"log-level":                {values: []string{"debug", "info", "warn", "error"}},
			"docker-host":              dockerHostArg,
			"scope":                    {values: []string{"local", "global"}},
			"default-address-pool":     {placeholder: "base=CIDR,size=N", repeat: true},
			"pool-reservation-timeout": {placeholder: "DURATION"},
			"resolv-conf":              {placeholder: "PATH", complete: "file"},
			"metrics-listen":           {placeholder: "HOST:PORT"},
			"profile":                  {placeholder: "DIR", complete: "file"},
			"sandbox-dir":              {placeholder: "DIR", complete: "file"},
			"container-repair-wait":    {placeholder: "DURATION"},
		},
		exits: []exitStatus{
			{0, "stopped by SIGTERM or SIGINT, or -h printed the flags"},
			{1, "the daemon failed: the socket or the state file could not be opened, or serving failed"},
			{2, "a flag or an environment variable is not valid, or an argument was given"},
		},
		files: []string{control.DefaultSocket, stateFile},
	}
}

func lsCommand() command {
	return command{
		name:    "ls",
		page:    "underlay-ls",
		summary: "list the networks and endpoints of the underlay daemon",
		description: []string{
			"underlay ls asks the running daemon for its state and prints its networks, their pools and their endpoints, with the names Docker gives them. When Docker cannot be asked the names are missing and a warning says why.",
			"Without --socket it finds the daemon at " + control.DefaultSocket + ", else the socket of the one managed plugin (" + control.PluginSockets + ").",
		},
		flags: control.LsFlags,
		args: map[string]flagArg{
			"socket":      socketArg,
			"docker-host": dockerHostArg,
		},
		exits: []exitStatus{
			{0, "the listing was printed"},
			{control.ExitCannot, "the daemon could not be asked, or a flag is not valid"},
		},
		files: []string{control.DefaultSocket},
	}
}

func doctorCommand() command {
	return command{
		name:    "doctor",
		page:    "underlay-doctor",
		summary: "check the underlay daemon's state, and the LAN a network is on",
		description: []string{
			"underlay doctor compares the daemon's state with the host's links and with Docker's networks, and prints what disagrees: links without a record, records without a link, networks Docker no longer has, pools no network uses. With --repair it fixes what is safe to fix, printing each action, and checks again. Each finding is confirmed by a second pass a moment later.",
			"underlay doctor --lan PARENT checks, before a network is made on PARENT, what its LAN allows: the parent link itself, whether frames from new MAC addresses get through, a wireless parent, DHCP and DHCPv6 servers, IPv6 router advertisements, the gateway and the MTU. Each check says ok, problem or unknown, with its evidence and a fix. It needs CAP_NET_RAW and CAP_NET_ADMIN (root), sends from a throwaway link in a network namespace of its own where it can, and judges by the driver options given with -o, or by those of an existing network (--network).",
		},
		flags: control.DoctorFlags,
		args: map[string]flagArg{
			"socket":      socketArg,
			"docker-host": dockerHostArg,
		},
		exits: []exitStatus{
			{control.ExitHealthy, "every check ran and found nothing (with --repair: nothing remains)"},
			{control.ExitFindings, "findings remain"},
			{control.ExitCannot, "doctor could not run: no daemon, or a flag is not valid"},
			{control.ExitIncomplete, "the checks that ran found nothing, but some were skipped (Docker could not be asked): health is unknown"},
		},
		files: []string{control.DefaultSocket},
	}
}

func lanCommand() command {
	return command{
		name:    "doctor --lan",
		page:    "underlay-doctor",
		summary: "check the LAN on a parent link before making a network",
		flags: func(getenv func(string) string) *flag.FlagSet {
			return lanFlags(&lanOptions{}, getenv)
		},
		args: map[string]flagArg{
			"lan":         {placeholder: "PARENT", complete: "link", required: true},
			"network":     {placeholder: "NAME|ID"},
			"o":           {placeholder: "KEY=VALUE", repeat: true},
			"timeout":     {placeholder: "DURATION"},
			"socket":      socketArg,
			"docker-host": dockerHostArg,
		},
		exits: []exitStatus{
			{control.ExitHealthy, "no check found a problem (a check that could not decide does not change the status)"},
			{control.ExitFindings, "a check found a problem"},
			{control.ExitCannot, "the checks could not run: not root, a flag is not valid, or --network is not found"},
		},
	}
}

func macCommand() command {
	return command{
		name:    "mac",
		page:    "underlay-mac",
		summary: "print the MAC address a container gets on a DHCP network",
		description: []string{
			"underlay mac prints the MAC address the container NAME gets on a network whose addresses come from DHCP on PARENT, exactly as its endpoint will get it: reserve its address on the LAN's DHCP server before the container first starts. It reads the host's links and needs no daemon.",
		},
		flags: func(func(string) string) *flag.FlagSet { return macFlags(&macOptions{}) },
		args: map[string]flagArg{
			"parent": {placeholder: "PARENT", complete: "link", required: true},
			"vlan":   {placeholder: "N"},
		},
		operand: "NAME",
		exits: []exitStatus{
			{0, "the MAC address was printed"},
			{1, "the address could not be made: PARENT is not a link of this host"},
			{2, "a flag or the container name is missing or not valid"},
		},
	}
}

func versionCommand() command {
	return command{
		name:    "version",
		page:    "underlay",
		summary: "print the version of underlay",
		exits:   []exitStatus{{0, "the version was printed"}},
	}
}

// commands are underlay's command lines, in the usage's order.
func commands() []command {
	return []command{serveCommand(), lsCommand(), doctorCommand(), lanCommand(), macCommand(), versionCommand()}
}

// flagNames are the names of fs's flags: required ones first (as args
// says), then by name. A nil fs has none.
func flagNames(fs *flag.FlagSet, args map[string]flagArg) []string {
	var names []string
	if fs == nil {
		return nil
	}
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.SliceStable(names, func(i, j int) bool {
		ri, rj := args[names[i]].required, args[names[j]].required
		if ri != rj {
			return ri
		}
		return names[i] < names[j]
	})
	return names
}

// dashes is how a flag is written: -o, --log-level.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// isBool reports whether a flag takes no value.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// valueName is the placeholder of a flag's value: args' placeholder, its
// values joined by "|", or flag's own name for the value's type.
func valueName(f *flag.Flag, a flagArg) string {
	switch {
	case a.placeholder != "":
		return a.placeholder
	case len(a.values) > 0:
		return strings.Join(a.values, "|")
	}
	name, _ := flag.UnquoteUsage(f)
	return strings.ToUpper(name)
}

// synopsisWords are a command line's words: "underlay", the command, each
// flag ("[--scope local|global]", "[-o KEY=VALUE]...") and the operand.
func synopsisWords(c command) []string {
	words := append([]string{"underlay"}, strings.Fields(c.name)...)
	if c.flags == nil {
		return words
	}
	fs := c.flags(noEnv)
	for _, name := range flagNames(fs, c.args) {
		if name == "lan" && c.name == "doctor --lan" {
			words[len(words)-1] += " " + valueName(fs.Lookup(name), c.args[name])
			continue
		}
		f, a := fs.Lookup(name), c.args[name]
		w := dashes(name)
		if !isBool(f) {
			w += " " + valueName(f, a)
		}
		if !a.required {
			w = "[" + w + "]"
		}
		if a.repeat {
			w += "..."
		}
		words = append(words, w)
	}
	if c.operand != "" {
		words = append(words, c.operand)
	}
	return words
}

// synopsis is a command line on one line.
func synopsis(c command) string {
	return strings.Join(synopsisWords(c), " ")
}

// usageText is the usage underlay prints: every command line, wrapped
// at 100 columns below its command.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range commands() {
		words := synopsisWords(c)
		start := 1 + len(strings.Fields(c.name))
		head := len("  underlay " + strings.Fields(c.name)[0] + " ")
		line := "  " + strings.Join(words[:start], " ")
		for _, w := range words[start:] {
			if len(line)+1+len(w) > 100 {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", head-1)
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("underlay COMMAND -h prints a command's flags; man underlay for more.\n")
	return b.String()
}
