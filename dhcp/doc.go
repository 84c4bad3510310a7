// Package dhcp leases IPv4 addresses for container endpoints from the DHCP
// server of their parent link's LAN. It runs in the daemon, in the host's
// network namespace, and speaks for endpoints whose links are not there:
// at CreateEndpoint the endpoint's macvlan/ipvlan link does not exist yet,
// and after Join it lives in the container.
//
// # API
//
// Client.Acquire runs DISCOVER, OFFER, REQUEST, ACK for a Request (parent,
// chaddr, option 61, option 12, an address to ask for again) within the
// caller's context, and returns a Lease: address with prefix length,
// router, option 121 routes, DNS, server ID, lease time, T1, T2 and when it
// was acquired. Client.Renew extends a lease; Client.Release gives it
// back, best effort. A server's DHCPNAK is ErrNAK; silence until the
// context ends is ErrNoAnswer (the message names the parent, the MAC and
// the client ID). Plan, a pure function, says what a lease calls for at a
// moment: wait for T1, renew, rebind, or acquire anew once expired.
//
// # How packets flow
//
// A call opens, on the parent, one AF_PACKET SOCK_RAW socket for ETH_P_IP
// with a BPF filter that keeps unfragmented UDP to port 68; concurrent
// calls on that parent share it and the last one closes it. The receive
// loop hands each reply to the transaction with its xid (fresh and random
// per transaction, unique on the socket), which keeps it if chaddr and, when
// echoed, option 61 are its own: ipvlan endpoints share the parent's MAC
// and differ only by client ID. Replies are parsed by the library
// (nclient4's IPv4/UDP parser, then dhcpv4); a malformed packet is dropped.
//
// Requests are framed here: Ethernet from Request.MAC to broadcast, IPv4
// 0.0.0.0 to 255.255.255.255, UDP 68 to 67. The Ethernet source is the
// endpoint's MAC (macvlan), not the parent's, so that a switch with DHCP
// snooping's MAC check (chaddr = source) passes them; nclient4's framing
// always uses the parent's. Every request but a RELEASE sets the BROADCAST
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
// A DHCPRELEASE goes from the leased address to the server's address (RFC
// 2131 section 4.4.6), in a broadcast frame. From 0.0.0.0 the server's
// kernel drops it as a martian source: tried with dnsmasq, whose lease line
// then stays. From the leased address, dnsmasq removes the line.
//
// # One acquisition at a time per parent
//
// dnsmasq pings every address before it offers it, for 3 s, one at a time,
// and serves its socket in order. Five concurrent acquisitions of new
// addresses with a 10 s context all failed: dnsmasq was still working
// through the DISCOVERs when time ran out. One at a time, three of the five
// succeeded (after 3.0, 6.1 and 9.1 s). So Acquire takes its turn per parent
// (the wait counts against its context, and the error says so). Renew and
// Release do not wait. With a fast server, twelve acquisitions in turn take
// tens of milliseconds (TestAcquireMacvlanEndpoints).
//
// # Why not nclient4
//
// nclient4 builds the right messages with modifiers (chaddr, option 61, the
// BROADCAST flag), but one nclient4.Client serves one chaddr. Its receive
// loop drops replies for other MACs, and clients cannot share a socket
// (each loop reads it), so every endpoint would need a socket of its own on
// the parent. Its Renew sends ciaddr with the flag cleared, and always
// expects the lease's server. Its Release is sent from 0.0.0.0. This
// package uses the library's dhcpv4 messages and parser, nclient4's
// IPv4/UDP reply parser, and server4 in the tests.
//
// # Needs
//
// Packet sockets need CAP_NET_RAW (the managed plugin's config.json lists
// it beside CAP_NET_ADMIN). A server that ignores the BROADCAST flag and
// unicasts to chaddr is not supported. For ipvlan endpoints the server must
// tell clients apart by option 61, as RFC 2131 asks.
package dhcp
