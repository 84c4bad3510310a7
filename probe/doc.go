// Package probe checks that an address is free on a parent link's LAN
// before an endpoint uses it, and announces an address once it is in use:
// IPv4 address conflict detection and announcements (RFC 5227), and their
// IPv6 counterparts, duplicate address detection style probes and
// unsolicited Neighbour Advertisements (RFC 4861 §7.2.6, RFC 4862 §5.4).
// It works from the host's namespace on the parent link, never inside a
// container's, so it needs CAP_NET_RAW only. It keeps the probes, the
// announcements and the conflict checks; the packet socket, its filter
// and memberships, and the Ethernet, IPv6 and ICMPv6 framing and
// checksums are package internal/rawlink's, which dhcp and dhcp6 share.
// It imports nothing else of the project.
//
// # Sending
//
// Every frame is built here (ARP, the Neighbour Solicitation) or by
// rawlink (the Neighbour Advertisement, the ICMPv6 checksum), Ethernet
// header included, and sent on an AF_PACKET SOCK_RAW socket bound to the
// parent (rawlink.Listen), so that its Ethernet
// source is the endpoint's MAC (a macvlan endpoint's link may not exist
// yet; an ipvlan endpoint's MAC is the parent's, which the caller passes).
//
// # Receiving
//
// A probe listens on an ETH_P_ALL socket bound to the parent. Such a tap
// sees every frame the parent receives (and sends) once, before any
// rx_handler (macvlan, ipvlan, bridge, 8021q) hands it to another link,
// and before a VLAN tag is taken off: frames of the parent's VLANs still
// carry their tag in the packet's metadata there, and the filter drops
// them (another VLAN is another LAN). A per-protocol (ETH_P_ARP) socket
// bound to the parent would also get the frames an rx_handler moved to a
// child link (the kernel delivers to the sockets of the original device
// too; seen on Linux 6.18), but VLAN frames only after their tag is
// stripped, indistinguishable from the parent's own. A classic BPF
// filter, attached before the socket is bound, keeps in the kernel only
// the frames that can be a conflict for this address (untagged ARP with
// sender IP = the address, or with sender IP 0.0.0.0 and target IP = the
// address; untagged ICMPv6 Neighbour Solicitations and Advertisements
// whose target is the address), so a busy LAN costs the daemon nothing;
// the rest is checked in Go.
//
// A LAN host answers an ARP probe with a reply unicast to the endpoint's
// MAC, which no link has yet: a real NIC drops such a frame. For the
// socket's lifetime the MAC is therefore added to the parent's unicast
// address filter (PACKET_ADD_MEMBERSHIP, PACKET_MR_UNICAST; a NIC without
// unicast filtering is put in promiscuous mode by the kernel instead). The
// kernel removes the membership when the socket closes, even if the daemon
// is killed. IPv6 probes also join the all-nodes and the address's
// solicited-node Ethernet multicast groups (PACKET_MR_MULTICAST), where
// the answers and the other hosts' simultaneous probes go.
//
// Not seen, as a rule: an address held by another endpoint on the same
// parent. Its link does not receive what is sent on the parent, so it
// does not answer; it is seen only if it happens to send ARP or NDP for
// the address during the probe (the tap sees what the parent sends too).
// Callers check their own records for those. With ipvlan every endpoint
// shares the parent's MAC, so what another ipvlan endpoint or the host
// itself sends from that MAC is never taken for a conflict.
//
// # Timing and cost
//
// A probe sends three probes, at 0, budget/3 and 2·budget/3 from its
// start, and listens until the budget ends. It returns at the first
// conflict; when nobody answers it takes exactly its budget, plus the
// socket's setup and the timers' lateness (a few milliseconds: 8-14 ms
// measured with a 900 ms budget under the race detector, from another
// namespace). RFC 5227 asks for 1–2 s
// between probes after a random wait of up to 1 s, too slow for a
// container's start; a short budget (e.g. 300 ms) still catches any host
// that answers ARP within 100 ms of the last probe, which is what a LAN
// host does, but a host that is asleep or slower may be missed.
//
// Announcements send count frames, interval apart, the first at once.
//
// A parent whose carrier has just come up may drop what is sent on it
// until the kernel's link watch has given it its queue (a few
// milliseconds): a probe sent then is lost, and the probe relies on the
// others.
package probe
