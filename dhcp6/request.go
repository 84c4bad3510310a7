package dhcp6

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// Request says for whom and where a lease is taken, renewed or given
// back. Keep its DUID and IAID with the lease: a renewal, a release or a
// later Acquire for the same endpoint must present the same ones.
type Request struct {
	// Parent is the link in the daemon's namespace the messages go out on.
	Parent string
	// MAC is the Ethernet source of the messages and the address
	// replies come to: the endpoint's MAC on macvlan, the parent's on
	// ipvlan (whose endpoints share it).
	MAC net.HardwareAddr
	// LinkLocal is the IPv6 source of the messages, the address servers
	// reply to; the zero Addr means LinkLocal(MAC).
	LinkLocal netip.Addr
	// DUID is the client's DUID (option 1) as it goes on the wire:
	// DUIDFromMAC for a macvlan endpoint, EndpointDUID for an ipvlan one.
	DUID []byte
	// IAID identifies the endpoint's IA_NA (EndpointIAID).
	IAID [4]byte
	// Hint, if set, is asked for in the Solicit (an address the endpoint
	// held before); servers are free to offer another.
	Hint netip.Addr
	// Hostname, if set, is sent as a partial name in the Client FQDN
	// option (39, RFC 4704) of a Solicit, Request, Renew and Rebind: the
	// LAN's server may put it in its DNS. One DNS label.
	Hostname string
}

// DUIDFromMAC is the DUID-LL (RFC 8415 section 11.4) of an Ethernet MAC:
// a macvlan endpoint's identity as a DHCPv6 client, which a server that
// knows clients by MAC (dnsmasq's dhcp-host) can match.
func DUIDFromMAC(mac net.HardwareAddr) []byte {
	d := dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac}
	return d.ToBytes()
}

// EndpointDUID is a DUID-UUID (RFC 6355) derived from an endpoint ID, for
// endpoints that have no MAC of their own (ipvlan): the UUID is the first
// 16 bytes of SHA-256("underlay dhcp6 duid " + id), with the version 8
// and variant bits of RFC 9562, so that it is stable across restarts and
// distinct per endpoint.
func EndpointDUID(endpointID string) []byte {
	h := sha256.Sum256([]byte("underlay dhcp6 duid " + endpointID))
	var u dhcpv6.DUIDUUID
	copy(u.UUID[:], h[:16])
	u.UUID[6] = u.UUID[6]&0x0f | 0x80
	u.UUID[8] = u.UUID[8]&0x3f | 0x80
	return u.ToBytes()
}

// EndpointIAID is a stable IAID for an endpoint's IA_NA: the first four
// bytes of SHA-256("underlay dhcp6 iaid " + id). An endpoint has one
// IA_NA, so the IAID only needs to be stable; it differs per endpoint so
// that ipvlan endpoints are told apart by servers keyed on IAID as well.
func EndpointIAID(endpointID string) [4]byte {
	h := sha256.Sum256([]byte("underlay dhcp6 iaid " + endpointID))
	return [4]byte(h[:4])
}

// check says what is missing or malformed in r.
func (r *Request) check() error {
	switch {
	case r.Parent == "":
		return fmt.Errorf("no parent link: name the link the endpoint's LAN is on")
	case len(r.MAC) != 6:
		return fmt.Errorf("MAC %q of the request on parent %s is not an Ethernet address: give the endpoint's MAC (the parent's on ipvlan)", r.MAC, r.Parent)
	case r.LinkLocal.IsValid() && !r.LinkLocal.IsLinkLocalUnicast():
		return fmt.Errorf("source %s of the request for %s on parent %s is not a link-local address (RFC 8415 section 13.1 has clients send from one): leave LinkLocal unset for the MAC's EUI-64 address", r.LinkLocal, r.MAC, r.Parent)
	case len(r.DUID) < 3 || len(r.DUID) > 130:
		return fmt.Errorf("client DUID %x of %s on parent %s is %d bytes, not 3 to 130 (RFC 8415 section 11.1): use DUIDFromMAC or EndpointDUID", r.DUID, r.MAC, r.Parent, len(r.DUID))
	case r.Hint.IsValid() && badAddress(r.Hint) != "":
		return fmt.Errorf("hint %s for %s on parent %s is %s: give a global unicast address or none", r.Hint, r.MAC, r.Parent, badAddress(r.Hint))
	}
	if _, err := dhcpv6.DUIDFromBytes(r.DUID); err != nil {
		return fmt.Errorf("client DUID %x of %s on parent %s does not parse: %w: use DUIDFromMAC or EndpointDUID", r.DUID, r.MAC, r.Parent, err)
	}
	return nil
}

// source is the IPv6 source of r's messages.
func (r *Request) source() netip.Addr {
	if r.LinkLocal.IsValid() {
		return r.LinkLocal
	}
	return LinkLocal(r.MAC)
}

// who names the client in errors and logs.
func (r *Request) who() string {
	return fmt.Sprintf("MAC %s (IAID %x, DUID %x)", r.MAC, r.IAID, r.DUID)
}
