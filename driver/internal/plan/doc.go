// Package plan is underlay's decisions, each a pure function over a
// snapshot: CreateNetwork's decision over the networks on a parent
// (Decide, decide.go), the parent resolver and the per-node choice
// (ResolveParent, resolve.go, pernode.go), the restore, release, repair
// and health planners whose steps package reconcile carries out (plan.go,
// health.go, repair.go), the Join answer (join.go), the blocks of lost
// leases (lostlease.go), the stable MAC (stablemac.go) and the LAN
// addresses of an endpoint (lanaddrs.go). What a request's options mean is
// package config's.
//
// Nothing here touches the kernel, the state file or a clock: inputs are a
// snapshot (records of package store/record, links and routes of package
// netlinkutil/kernel, a time passed in), outputs are values, plans and
// errors. Package driver reads the snapshot and package reconcile carries
// the plans out. TestPure keeps it so: this package (and config, which it
// builds on) links neither netlink nor bbolt.
package plan
