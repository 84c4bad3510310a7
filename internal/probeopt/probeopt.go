// Package probeopt reads address_probe, the budget of an address probe,
// once for the driver (-o address_probe=) and the IPAM (--ipam-opt
// address_probe=); each caller words its own refusal. A leaf.
package probeopt

import "time"

// Name is the option's name, the same for the driver and the IPAM.
const Name = "address_probe"

const (
	// Default is the budget where the probe is on by default: three
	// probes within it, well under RFC 5227's 3 to 5 s (PROBE_WAIT and
	// 1-2 s between probes), which a container's start cannot wait.
	Default = 300 * time.Millisecond
	// Max is the longest budget accepted.
	Max = 5 * time.Second
)

// Parse reads a budget: a duration from 0 ("0": off) to Max; ok is false
// for anything else.
func Parse(v string) (d time.Duration, ok bool) {
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 || d > Max {
		return 0, false
	}
	return d, true
}
