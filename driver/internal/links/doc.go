// Package links holds the links underlay makes, owns and keeps: the
// parent links it creates (Maker: a VLAN on a base, a dummy for an
// internal network; maker.go), the resolution of a network's parent
// option to the link it names on this host (Resolver, resolve.go), the
// effects the requests and the planners' steps share on owned links
// (Owned: the one way underlay deletes a link, re-creating a missing
// owned parent from its record, following an owned VLAN an operator
// renamed with the blocks of lost leases on it; owned.go, parent.go,
// follow.go), the host's own link on a network with a host address and
// its routes to the joined endpoints (Shims, shim.go), and what the live
// repair remembers between its passes (SelfDeletions, FailureLog;
// memo.go).
//
// Rules: the kernel only through netlinkutil.Links; the store only
// through Owned's Store. Creating a parent link is Maker's, resolving a
// parent option Resolver's; deleting a link is Owned.Delete's alone (it
// tells the repair watcher), and nothing without this instance's mark is
// ever deleted. A parent lock is only tried (TryParent), never waited
// for: a request's caller already holds the lock it needs. The memo is
// memory only (the time is the caller's); its zero values are ready.
package links
