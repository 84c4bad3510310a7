package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/underlay-net/underlay/ipam"
	"github.com/underlay-net/underlay/netlinkutil"
)

// runMAC is `underlay mac --parent PARENT [--vlan N] NAME`: the MAC the
// container NAME gets on a DHCP pool of PARENT (ipam.NameMAC, exactly as
// its endpoint gets it), to reserve its address on the LAN's DHCP server
// before the container first starts. It reads the host's links and needs
// no daemon.
// macOptions are the flags of `underlay mac`.
type macOptions struct {
	parent string
	vlan   int
}

// macFlags is the flag set of `underlay mac`, defined into o: the
// parser's and the manual page's.
func macFlags(o *macOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("underlay mac", flag.ContinueOnError)
	fs.StringVar(&o.parent, "parent", "", "the network's parent interface (its -o parent and --ipam-opt parent)")
	fs.IntVar(&o.vlan, "vlan", 0, "the VLAN ID when the network's parent is VLAN N of --parent (-o parent=PARENT.N)")
	return fs
}

func runMAC(args []string, stdout, stderr io.Writer) int {
	var o macOptions
	fs := macFlags(&o)
	parent, vlan := &o.parent, &o.vlan
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage:", synopsis(macCommand()))
		fs.PrintDefaults()
	}
	// Flags may come after NAME too.
	var names []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch {
	case *parent == "":
		fmt.Fprintln(stderr, "underlay mac: --parent is missing: give the interface the network is on (its -o parent), such as --parent eth0")
		return 2
	case len(names) == 0:
		fmt.Fprintf(stderr, "underlay mac: the container name is missing: underlay mac --parent %s NAME\n", *parent)
		return 2
	case len(names) != 1:
		fmt.Fprintf(stderr, "underlay mac: give one container name (got %d: %s), such as: underlay mac --parent %s web\n", len(names), strings.Join(names, " "), *parent)
		return 2
	case *vlan < 0 || *vlan > 4094:
		fmt.Fprintf(stderr, "underlay mac: --vlan %d is not a VLAN ID from 1 to 4094\n", *vlan)
		return 2
	}
	links := netlinkutil.New()
	mac, err := ipam.NameMAC(context.Background(), links, *parent, *vlan, names[0])
	if p, v, ok := strings.Cut(*parent, "."); err != nil && ok && *vlan == 0 && v != "" {
		fmt.Fprintf(stderr, "underlay mac: %v: for VLAN %s of %s before its link exists, give --parent %s --vlan %s\n", err, v, p, p, v)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "underlay mac:", err)
		return 1
	}
	fmt.Fprintln(stdout, mac)
	return 0
}
