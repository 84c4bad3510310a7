// Package config turns a network's request into its typed configuration
// and says what is wrong with one: the one driver option table
// (DriverOptions, optiontable.go: name, values, default, one-line doc,
// parser), which drives ParseOptions, the refusal's list of valid names
// and the option table of docs/networks.md; ParseNetwork (options.go) into a
// record.Network with its typed record.NetworkConfig, filled once at
// CreateNetwork; the parent option's syntax (ParseParent, parent.go), the
// host address (hostaddress.go), the DHCP and IPv6 checks of a create
// (dhcp.go, ipv6.go), the MAC policy, probe and announcement options
// (macpolicy.go, probe.go), the endpoint's address and interface name
// options (endpoint.go), the names of underlay's own links and the checks
// of the names users give (names.go), and the swarm manager's
// AllocateNetwork (swarm.go).
//
// Rule: a function of its inputs only (no kernel, state file, clock or
// randomness), as package plan, which builds on it (plan's TestPure
// covers this package too). Refusals wrap pluginapi.ErrInvalid and name
// the offending value and the fix.
package config
