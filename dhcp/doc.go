// Package dhcp leases IPv4 addresses for container endpoints from the DHCP
// server of their parent link's LAN. It runs in the daemon, in the host's
// network namespace, and speaks for endpoints whose links are not there:
// at CreateEndpoint the endpoint's macvlan/ipvlan link does not exist yet,
// and after Join it lives in the container. It keeps the DHCP messages and
// the client's state machine; the raw link under it (packet socket, BPF
// filter, framing and checksums, the per-parent port and its receive
// loop) is package internal/rawlink, which dhcp6 and probe share, and the
// T1/T2/retry schedule behind Plan is internal/leasetime, shared with
// dhcp6. It imports nothing else of the project.
//
// # API
//
// Client.Acquire runs DISCOVER, OFFER, REQUEST, ACK for a Request (parent,
// chaddr, option 61, option 12, an address to ask for again, or the Only
// address to take) within the caller's context, and returns a Lease:
// address with prefix length, router, option 121 routes, DNS, server ID,
// lease time, T1, T2, when it was acquired, and Warnings (what was dropped
// from the ACK). Client.Renew extends a lease; Client.Release gives it
// back and Client.Decline refuses it (the address is in use), both best
// effort. A server's DHCPNAK is ErrNAK; silence until the context ends is
// ErrNoAnswer (the message names the parent, the MAC and the client ID),
// with ErrFragmented when a reply came IP-fragmented; only unusable offers
// are ErrUnusable; only other addresses than Request.Only, ErrNotOffered.
// Plan, a pure function, says what a lease calls for at a moment: wait for
// T1, renew, rebind, or acquire anew once expired. WithConn builds a client
// over an injected frame connection (tests without root). Client.Offers,
// for the LAN preflight (package lancheck), sends only DISCOVERs and
// returns every server's OFFER seen until its context ends: nothing is
// leased.
//
// # Rogue and broken servers
//
// What a server sends is checked before it is used; every limit below is
// tested against the scriptable server of internal/itest.
//
//   - An OFFER is judged as its ACK would be. One of an address no
//     endpoint may use — in 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16,
//     224.0.0.0/4 or 240.0.0.0/4 (255.255.255.255 included), the subnet's
//     network or broadcast address (a /31 or /32 has none), or the server's
//     own — is not REQUESTed but DECLINEd (RFC 2131 section 4.4.1: option
//     50 the address, option 54 the server, option 56 why, ciaddr 0, by
//     broadcast), so that a server offers another; the DISCOVER is sent
//     again after half a second. An OFFER with a mask below /8 (/0 too) or
//     a lease under MinLeaseTime (10 s; 0 too) is not REQUESTed either.
//     RFC 2131 has a client wait 10 s before it starts again after a
//     DECLINE; a container's start cannot, so it is half a second, and at
//     most maxRefusals (4) offers and ACKs are refused per Acquire: then
//     the error (ErrUnusable) names each address, its server and why.
//   - An ACK is checked again: an unusable address is DECLINEd, an
//     unusable mask or lease time RELEASEd (the server's binding is
//     freed), and Acquire starts over with a DISCOVER.
//   - Leases under 10 s are refused, not stretched: an address kept longer
//     than the server granted could be another host's by then. A Renew
//     whose ACK is refused is an error wrapping ErrUnusable, and the lease
//     stands as it was until it expires.
//   - A router (option 3) that is the subnet's network or broadcast
//     address, the leased address itself or in a special range is dropped
//     (the next one of option 3 is taken, else none: the lease has no
//     gateway), and so is an option 121 route to the connected subnet, a
//     second route to a destination, or one via such a gateway: each with
//     a Warning (Acquire logs them at WARN), since the container's kernel
//     would refuse them and fail its start. When every option 121 route is
//     dropped, Gateway falls back to option 3.
//   - A DHCPNAK without option 54 (RFC 2131 requires it), or from a server
//     other than the one REQUESTed, is ignored (the error of an exchange
//     that then gets no answer says so). A valid NAK during an Acquire
//     starts over with a DISCOVER after half a second, at most maxRounds
//     (5) rounds, then ErrNAK.
//   - T1 and T2 (options 58, 59) of 0, under a second or not before the
//     expiry are ignored (the defaults, 1/2 and 7/8 of the lease, apply),
//     in leaseFromACK and in Plan, so that renewals and rebinding come
//     before the lease ends, at most one a second (MinRetryShort).
//   - A reply larger than a frame arrives IP-fragmented. Fragments are not
//     reassembled; the filter also keeps first fragments to port 68, whose
//     xid tells the transaction that it got one, so that its ErrNoAnswer
//     says so (with ErrFragmented) and names the fix (fewer options, e.g.
//     option 121 routes: option 57 asks for at most 1500 bytes).
//
// # How packets flow
//
// A call takes the parent's rawlink.Port: one AF_PACKET SOCK_RAW socket
// for ETH_P_IP with a BPF filter, attached before it is bound, that keeps
// UDP to port 68 (unfragmented, or first fragments: see above);
// concurrent calls on that parent share it and the last one closes it.
// The port's receive loop reads each frame with rawlink's IPv4/UDP parser
// and this package's demux, which decodes the DHCP message (the library's
// dhcpv4) and hands it to the transaction with its xid (fresh and random
// per transaction, unique on the socket); the transaction keeps it if
// chaddr and, when echoed, option 61 are its own: ipvlan endpoints share
// the parent's MAC and differ only by client ID. A malformed packet is
// dropped. With WithConn the connection is the caller's, unfiltered;
// everything else is the same.
//
// Requests are framed by rawlink (UDP4): Ethernet from Request.MAC to
// broadcast, IPv4 0.0.0.0 to 255.255.255.255, UDP 68 to 67. The Ethernet
// source is the endpoint's MAC (macvlan), not the parent's, so that a
// switch with DHCP snooping's MAC check (chaddr = source) passes them;
// nclient4's framing always uses the parent's. Every request but a RELEASE sets the BROADCAST
// flag, so that the server answers by broadcast, which the parent receives.
// A unicast reply to the endpoint's MAC is not seen by the socket once the
// endpoint's link is in the container: the macvlan handler hands the frame
// to that link and packet_rcv drops frames of a device in another
// namespace. Before the link exists a real NIC filters frames to an unknown
// MAC. (While the link is still in the host's namespace, the socket does
// see such unicasts: the kernel delivers to the parent's ETH_P_IP sockets
// after the handler too. An ETH_P_ALL tap always sees them.)
// TestUnicastToMacvlanChildIsMissed shows each case on the kernel.
//
// Renewals are broadcast DHCPREQUESTs with ciaddr 0 and option 50 (the
// leased address): with option 54 until T2 (Plan's Renewing), without it
// from T2 on (Rebinding, INIT-REBOOT style, any server may answer). An RFC
// 2131 RENEWING request (ciaddr set) is answered by unicast to ciaddr, that
// is to the container. dnsmasq 2.90 in TestDnsmasq: to both broadcast
// renewals it logs "DHCPACK … broadcast response" and the lease file's
// expiry moves forward. To a RENEWING request, even with the BROADCAST flag,
// it logs a DHCPACK without "broadcast response", resolves ciaddr by ARP and
// unicasts it to the endpoint's link in the "container" namespace. Only an
// ETH_P_ALL tap on the parent sees those frames; the client gets nothing.
//
// A DHCPDECLINE, like a DISCOVER, goes from 0.0.0.0 to 255.255.255.255.
// A DHCPRELEASE goes from the leased address to the server's address (RFC
// 2131 section 4.4.6), in a broadcast frame. From 0.0.0.0 the server's
// kernel drops it as a martian source: tried with dnsmasq, whose lease line
// then stays. From the leased address, dnsmasq removes the line.
//
// # Acquisitions on a parent overlap
//
// Exchanges on one parent run at once: each waits only for its own xid.
// Against a server that answers every message 150 ms late, 32 concurrent
// Acquires take about 0.3 s (TestConcurrentAcquisitionsOverlap; in turn
// they took 9.75 s, against the driver's 10 s default dhcp_timeout). The
// cost falls on a server that works through its socket one message at a
// time and slowly: dnsmasq pings each new address for up to 3 s before it
// offers it, in order (when acquisitions took turns, three of five
// finished, after 3.0, 6.1 and 9.1 s); at once, they compete for its time
// and retransmitted DISCOVERs queue behind the rest. With such a server
// give dhcp_timeout room, or run dnsmasq with --no-ping on a LAN whose
// addresses it alone hands out.
//
// # Why not nclient4
//
// nclient4 builds the right messages with modifiers (chaddr, option 61, the
// BROADCAST flag), but one nclient4.Client serves one chaddr. Its receive
// loop drops replies for other MACs, and clients cannot share a socket
// (each loop reads it), so every endpoint would need a socket of its own on
// the parent. Its Renew sends ciaddr with the flag cleared, and always
// expects the lease's server. Its Release is sent from 0.0.0.0. This
// package uses the library's dhcpv4 messages and parser, and server4 in
// the tests; the raw connection and the framing apart from the client,
// as nclient4's conn_unix.go and ipv4.go are, live in internal/rawlink.
//
// # Needs
//
// Packet sockets need CAP_NET_RAW (the managed plugin's config.json lists
// it beside CAP_NET_ADMIN). A server that ignores the BROADCAST flag and
// unicasts to chaddr is not supported. For ipvlan endpoints the server must
// tell clients apart by option 61, as RFC 2131 asks.
package dhcp
