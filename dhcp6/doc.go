// Package dhcp6 leases IPv6 addresses (IA_NA, RFC 8415) for container
// endpoints from the DHCPv6 server of their parent link's LAN, for the
// driver's ipv6_mode=dhcpv6 (issue 26). Like package dhcp it runs in the
// daemon, in the host's network namespace, and speaks for endpoints whose
// links are not there: at CreateEndpoint the endpoint's macvlan/ipvlan
// link does not exist yet, and after Join it lives in the container. It
// keeps the DHCPv6 messages and the client's state machine; the raw link
// under it (packet socket, BPF filter, memberships, framing and
// checksums, the per-parent port that demultiplexes replies and answers
// Neighbour Solicitations) is package internal/rawlink, shared with dhcp
// and probe, and the T1/T2/retry schedule behind Plan is
// internal/leasetime, shared with dhcp. It imports nothing else of the
// project.
//
// # API
//
// Client.Acquire runs Solicit, Advertise, Request, Reply for a Request
// (parent, MAC, client DUID, IAID, an address to ask for again) within
// the caller's context and returns a Lease: address, preferred and valid
// lifetimes, T1, T2, IAID, the server's DUID, DNS servers (option 23),
// when it was obtained, and Warnings (what was changed). Client.Renew (at
// T1, to the lease's server) and Client.Rebind (at T2, any server) extend
// it; Client.Release gives it back and Client.Decline refuses it (a
// duplicate address detection probe found it in use), both waiting for
// the server's Reply (at most 4 transmissions) and never fatal: their
// error is for the log. Plan, a pure function, says what a lease calls
// for at a moment: wait for T1, renew, rebind, or acquire anew once
// expired. Errors wrap ErrNoAnswer, ErrNoAddrsAvail, ErrNoBinding (the
// server no longer holds the lease: stop using the address, Acquire
// anew), ErrUnusable or ErrRefused. WithConn builds a client over an
// injected frame connection (tests without root). Client.Advertises,
// for the LAN preflight (package lancheck), sends only Solicits and
// returns every server's Advertise seen until its context ends: nothing
// is bound.
//
// # Identities
//
// A macvlan endpoint's DUID is DUIDFromMAC, the DUID-LL of its own MAC
// (no time in it: DUID-LLT would change with every daemon that computed
// it). ipvlan endpoints share the parent's MAC, so theirs is EndpointDUID,
// a DUID-UUID hashed from the endpoint ID. EndpointIAID hashes the
// endpoint ID too; each endpoint has one IA_NA. Both are stable: the
// driver can recompute them after a restart, and a server keyed on
// (DUID, IAID) gives an endpoint re-created with the same ID its address.
//
// # How packets flow
//
// Clients send from a link-local address to ff02::1:2, UDP 546 to 547,
// and servers answer by unicast to that address and port 546, after
// resolving it by Neighbour Discovery. A UDP socket in the host's
// namespace cannot do this for an endpoint (the address is not the
// host's; after Join the endpoint's link is in the container, which
// underlay never enters), so, as package dhcp and package probe do, a
// call takes the parent's rawlink.Port, one AF_PACKET SOCK_RAW socket, and
// every frame is built by rawlink (UDP6): Ethernet from Request.MAC, IPv6
// from the MAC's modified EUI-64 link-local address (LinkLocal;
// Request.LinkLocal overrides), UDP with its checksum; the library
// (github.com/insomniacslk/dhcp/dhcpv6) encodes and parses the DHCPv6
// messages only. Concurrent calls on a parent share the port; its receive
// loop hands replies to the call with their transaction ID (random,
// unique on the socket), which takes them only when their destination
// MAC is the Request's and their client identifier its DUID.
//
// The socket is an ETH_P_ALL tap: it sees what the parent receives before
// any rx_handler, so a reply unicast to a macvlan endpoint's MAC is seen
// even once that link is in the container (a per-protocol socket on the
// parent misses such frames there: see package dhcp). A classic BPF
// filter keeps only untagged, incoming IPv6 UDP to port 546 and ICMPv6
// Neighbour Solicitations. While a call runs, the endpoint's MAC is in
// the parent's unicast filter (PACKET_MR_UNICAST) and its link-local
// address's solicited-node group in its multicast filter, and the port
// (rawlink.Port.Claim) answers Neighbour Solicitations for that address
// with a solicited, override Advertisement from the endpoint's MAC:
// before the endpoint's link exists, or when the container has IPv6 off
// or another link-local address, nobody else would, and the server could
// not send its reply.
// When the container's kernel answers too, both say the same MAC. The
// kernel drops the memberships when the socket closes.
//
// For ipvlan the MAC is the parent's and so is the link-local address:
// replies reach the host's kernel, which drops them (nothing listens on
// port 546) after the tap has seen them; the host's kernel answers the
// Neighbour Solicitations itself.
//
// Every message goes to ff02::1:2, Renew and Release included: RFC 8415
// lets a client unicast only to a server that sent a Server Unicast
// option (12), which this client ignores, since a unicast reply path
// would need the endpoint's global address on a link in the host. A
// Reply with status UseMulticast therefore cannot be acted on: it is an
// error wrapping ErrRefused, the lease standing.
//
// # Choices
//
//   - Rapid Commit (RFC 8415 section 21.14) is off by default and turned on
//     with WithRapidCommit: with two servers on a LAN, each that
//     rapid-commits keeps a binding the client never uses.
//   - Advertise selection: the best preference received within
//     WithCollect (200 ms) of the first usable Advertise, at once for
//     preference 255. RFC 8415 section 18.2.1 collects for the first
//     retransmission timeout (1 s); a container start should not pay that
//     on a LAN with one server. The first Solicit is not delayed
//     (SOL_MAX_DELAY), as for a client that knows it just attached.
//   - Retransmission: 1 s (WithRetransmit), doubled up to 16 s, ±10%,
//     until the context ends; Release and Decline at most 4 times.
//   - An Acquire that gets an unusable address in a Reply sends one
//     Decline without waiting for its Reply, then solicits again.
//
// # Rogue and broken servers
//
// Every rule is tested against the in-process server of the tests.
//
//   - An address that is not global unicast is refused: link-local,
//     multicast, loopback, unspecified, IPv4-mapped (::ffff:0:0/96),
//     anything else in ::/8, site-local (fec0::/10). Advertised, it is
//     not Requested (the Advertise is ignored, noted in the error);
//     granted in a Reply, it is Declined and the Acquire starts over.
//   - Lifetimes: valid under MinLifetime (10 s; 0 too) is refused, and a
//     preferred over the valid one (RFC 8415 section 21.6 has the client
//     discard the address), and an IA_NA with T1 after T2, both non-zero
//     (section 21.4: discarded). T1 or T2 of 0 (the client's choice) are
//     0.5 and 0.8 of the preferred lifetime (the valid one when it is 0),
//     a T2 not before the valid lifetime's end 0.8 of it (with a Warning),
//     a T1 after T2 T2, under a second a second; 0xffffffff is Infinite.
//   - Status codes: an Advertise with NoAddrsAvail is ignored; a Reply to
//     a Request whose IA_NA says NoAddrsAvail or NotOnLink starts over
//     (NotOnLink without the hint), at most 5 rounds, then
//     ErrNoAddrsAvail or ErrUnusable. A Reply to a Renew or Rebind with
//     NoBinding, without the address, or with its valid lifetime 0 is
//     ErrNoBinding; other statuses ErrRefused, the lease standing.
//   - A reply with another transaction ID, another client identifier or
//     to another MAC is never seen by the call; one without a server
//     identifier, or (to a Request, Renew, Release, Decline) from another
//     server than the one asked, is ignored and noted. Relay messages,
//     truncated and malformed frames are dropped; the parser's panics are
//     recovered.
//   - A Release or Decline answered with an error status, or not at all,
//     is an error wrapping ErrRefused or ErrNoAnswer that the caller logs.
//
// # Needs
//
// Packet sockets need CAP_NET_RAW. Extension headers in replies are not
// followed; VLAN-tagged frames on the parent are another LAN's. The
// prefix length is not DHCPv6's to give: the on-link prefix comes from
// the router advertisements (or the network's subnet).
package dhcp6
