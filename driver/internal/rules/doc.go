// Package rules is underlay's driver logic that is a function of what it
// is given: option parsing (the driver option table, optiontable.go, into
// the typed record.NetworkConfig) and name rules, CreateNetwork's decision
// (decide), the parent resolver and the per-node choice, the restore,
// release, repair and health planners, the DHCP option checks, the Join
// answer and the address-probe and announcement options.
//
// Nothing here touches the kernel, the state file or a clock: inputs are a
// snapshot (records of package store/record, links and routes of package
// netlinkutil/vocab, a time passed in), outputs are values, plans and
// errors. Package driver reads the snapshot and carries the plans out.
// TestPure keeps it so: this package links neither netlink nor bbolt.
package rules
