// Package record holds the plain records of underlay's state file: a
// network, its pools and reservation, an endpoint, its lease, a parent link
// underlay created and a lease to give back. They are values with JSON
// tags and no database: package store keeps them in bbolt and aliases these
// names, and pure code (driver/internal/config, driver/internal/plan) decides over them without
// linking the database.
package record

import "time"

// Network is the stored form of one network: its effective configuration
// and, while it is being created, the reservation that claims its parent.
type Network struct {
	// ID is Docker's network ID.
	ID string `json:"id"`
	// Type is "macvlan" or "ipvlan".
	Type string `json:"type"`
	// Parent is the host link the endpoints hang off, by its kernel name:
	// what the requested parent (Options["parent"], kept as the user gave
	// it) resolved to on this host, a VLAN sub-interface, or the dummy link
	// of an internal network. Locks and conflicts go by this name.
	Parent string `json:"parent"`
	// Mode is the macvlan mode or the ipvlan mode.
	Mode string `json:"mode"`
	// Flag is the ipvlan flag; empty for macvlan.
	Flag string `json:"flag,omitempty"`
	// MTU is the endpoint MTU; 0 means the parent's.
	MTU int `json:"mtu,omitempty"`
	// Internal networks get no gateway and no default route.
	Internal bool `json:"internal,omitempty"`
	// IPv4 and IPv6 are the address pools Docker's IPAM gave the network.
	IPv4 []Pool `json:"ipv4,omitempty"`
	IPv6 []Pool `json:"ipv6,omitempty"`
	// HostAddress is the host's own IPv4 address on the network: underlay
	// keeps a shim link with it on the parent and a /32 route to every
	// joined endpoint through it. Empty without host_address.
	HostAddress string `json:"host_address,omitempty"`
	// Options are the validated driver options as the user gave them
	// (reuse and the stale-duplicate rule compare them as asked).
	Options map[string]string `json:"options,omitempty"`
	// Config is what the options of Options that no field above holds
	// mean, parsed once at CreateNetwork from package config's option table (driver/internal/config).
	// It is zero in records written before it was kept: the driver fills
	// it from Options once, at start (Restore), before anything reads it.
	Config NetworkConfig `json:"config,omitzero"`
	// Pending is set from the reservation until the network is complete.
	Pending *Reservation `json:"pending,omitempty"`
	// Created is when this record was first written; zero for records of
	// underlay versions before it was kept (treated as old).
	Created time.Time `json:"created,omitzero"`
	// EngineAnnounces is set when the engine that created the network
	// announces its endpoints' addresses itself (engines 28 and later,
	// which send com.docker.network.enable_ipv4): underlay then sends no
	// announcements of its own.
	EngineAnnounces bool `json:"engine_announces,omitempty"`
}

// NetworkConfig is a network's configuration from its driver options
// (docker network create -o), typed. The zero value is a record's that
// has not been parsed yet; a parsed one always names its IPv6 mode and MAC
// policy.
type NetworkConfig struct {
	// DHCP is -o dhcp and -o dhcp_timeout.
	DHCP DHCPConfig `json:"dhcp,omitzero"`
	// IPv6Mode is -o ipv6_mode: "static", "slaac" or "dhcpv6".
	IPv6Mode string `json:"ipv6_mode,omitempty"`
	// MACPolicy is -o mac_address_policy: "stable" or "random".
	MACPolicy string `json:"mac_policy,omitempty"`
	// Probe is -o address_probe.
	Probe AddressProbe `json:"probe,omitzero"`
	// Announce is -o com.docker.network.advertise_addr_nmsgs and
	// com.docker.network.advertise_addr_ms.
	Announce Announce `json:"announce,omitzero"`
	// AllowWireless is -o allow_wireless: macvlan on a Wi-Fi parent is
	// created (the LAN preflight refuses it otherwise).
	AllowWireless bool `json:"allow_wireless,omitempty"`
	// NoLANCheck is -o lan_check=false: no LAN preflight in the
	// background after the create (zero: it runs).
	NoLANCheck bool `json:"no_lan_check,omitempty"`
}

// DHCPConfig is a network's DHCP configuration.
type DHCPConfig struct {
	// On: IPv4 addresses come from the LAN's DHCP server (-o dhcp=true).
	On bool `json:"on,omitempty"`
	// Timeout bounds each lease's exchange (of DHCPv4 and DHCPv6) at
	// CreateEndpoint (-o dhcp_timeout).
	Timeout time.Duration `json:"timeout,omitempty"`
	// FromIPAM: the network's IPv4 pool is a DHCP pool of underlay's IPAM
	// (--ipam-opt dhcp=true): it leases each endpoint's address, and the
	// driver gives the endpoint the lease's MAC and renews it.
	FromIPAM bool `json:"from_ipam,omitempty"`
	// FromIPAM6: the network's IPv6 pool is a DHCPv6 pool of underlay's
	// IPAM (--ipam-opt dhcpv6=true), as FromIPAM is for IPv4.
	FromIPAM6 bool `json:"from_ipam6,omitempty"`
}

// Leases says the network's endpoints hold DHCP leases the driver renews:
// its own (-o dhcp=true) or the IPAM's (FromIPAM).
func (c DHCPConfig) Leases() bool { return c.On || c.FromIPAM }

// AddressProbe is the budget of the probe of an endpoint's addresses.
type AddressProbe struct {
	// Budget is how long the probe may take; 0 is off.
	Budget time.Duration `json:"budget,omitempty"`
	// Given says -o address_probe was given: without it, Budget is not
	// used and the driver's default rule decides.
	Given bool `json:"given,omitempty"`
}

// Announce is how many announcements of a joined endpoint's addresses
// are sent, and how far apart.
type Announce struct {
	// Count is 0 (none) to 3.
	Count int `json:"count,omitempty"`
	// Interval is the time between two.
	Interval time.Duration `json:"interval,omitempty"`
}

// Pool is one IPAM pool of a network.
type Pool struct {
	// Subnet in CIDR form.
	Subnet string `json:"subnet"`
	// Gateway address without prefix length; empty when the pool has none.
	Gateway string `json:"gateway,omitempty"`
}

// Reservation marks a network whose creation has not finished. Whoever
// finds it after its Deadline, or at start, rolls the network back.
type Reservation struct {
	// Token identifies the request that made the reservation.
	Token string `json:"token"`
	// Deadline is when the reservation expires.
	Deadline time.Time `json:"deadline"`
}

// Endpoint is the stored form of one endpoint.
type Endpoint struct {
	NetworkID string `json:"network"`
	ID        string `json:"id"`
	// Link is the name of the endpoint's link in the host namespace.
	Link string `json:"link"`
	// MAC is the endpoint's MAC address; empty for ipvlan.
	MAC string `json:"mac,omitempty"`
	// IPv4 and IPv6 are the endpoint's addresses in CIDR form.
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
	// Sandbox is set while the endpoint is joined: the sandbox key of the
	// Join whose link libnetwork moved into a container, in the host boot
	// Boot (a reboot ends every sandbox).
	Sandbox string `json:"sandbox,omitempty"`
	Boot    string `json:"boot,omitempty"`
	// Lease is the DHCP lease of an endpoint of a dhcp=true network.
	Lease *Lease `json:"lease,omitempty"`
	// Lease6 is the DHCPv6 lease of an endpoint of an ipv6_mode=dhcpv6
	// network.
	Lease6 *Lease6 `json:"lease6,omitempty"`
	// Plumb is the endpoint's interface in its container, as libnetwork
	// plumbed it after the Join (read there): what a repair makes again
	// after the kernel deleted it with its parent link. Set with Sandbox
	// and Boot once read; cleared with them by Leave.
	Plumb *Plumb `json:"plumb,omitempty"`
}

// Plumb is a joined endpoint's interface in its container's namespace.
type Plumb struct {
	// IfName is the container's name for the interface (eth0).
	IfName string `json:"ifname"`
	MTU    int    `json:"mtu"`
	// ParentIndex is the index of the host link it stands on: a parent
	// of that name with another index is a re-created one, without it.
	ParentIndex int `json:"parent_index"`
	// NetnsDev and NetnsIno identify the namespace the Sandbox path
	// opened: a path that opens another one is no longer the container's.
	NetnsDev uint64 `json:"netns_dev"`
	NetnsIno uint64 `json:"netns_ino"`
	// Repairs counts the times underlay made the interface again.
	Repairs int `json:"repairs,omitempty"`
	// Default4 and Default6 say the container's default route of that
	// family went through the interface (its gateway endpoint): only
	// those are put back, never over another network's.
	Default4 bool `json:"default4,omitempty"`
	Default6 bool `json:"default6,omitempty"`
}

// ParentLink is a parent link underlay created (a VLAN sub-interface or an
// internal network's dummy link) and so owns: it is deleted with the last
// network on it and re-created at start if it vanished.
type ParentLink struct {
	Name string `json:"name"`
	// Kind is "vlan" or "dummy".
	Kind string `json:"kind"`
	// Base is the VLAN's underlying link.
	Base string `json:"base,omitempty"`
	// VLAN is the 802.1Q VLAN ID.
	VLAN int `json:"vlan,omitempty"`
	// MTU is set on creation when non-zero.
	MTU int `json:"mtu,omitempty"`
}

// PendingRelease is a lease the daemon must give back unless an
// endpoint's record holds it.
type PendingRelease struct {
	NetworkID  string `json:"network"`
	EndpointID string `json:"endpoint"`
	// Parent, MAC and ClientID (hex) are what the RELEASE is sent with.
	Parent   string `json:"parent"`
	MAC      string `json:"mac"`
	ClientID string `json:"client_id,omitempty"`
	Lease    Lease  `json:"lease"`
	// Lease6 is, instead of Lease, a DHCPv6 lease (its DUID and IAID are
	// what the Release is sent with, with Parent and MAC).
	Lease6 *Lease6 `json:"lease6,omitempty"`
	// Since is when it was written.
	Since time.Time `json:"since"`
	// Deletion says the entry was written with its endpoint's deletion
	// (DeleteEndpoint, DeleteNetwork), for the release sent after that
	// commit; false for one written right after the exchange, before the
	// endpoint's record, and for entries written before this field was.
	Deletion bool `json:"deletion,omitempty"`
}

// Addr is the address of the journaled lease (its key with the network
// and endpoint IDs).
func (r PendingRelease) Addr() string {
	if r.Lease6 != nil {
		return r.Lease6.Addr
	}
	return r.Lease.Addr
}
