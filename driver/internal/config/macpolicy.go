package config

// The MAC of a macvlan endpoint Docker gave none: with the stable policy
// (the default) it is derived from the parent and the endpoint's address,
// so that the same address on the same host's parent always gets the same
// MAC — across container re-creation, network re-creation and reboots —
// and the LAN's switches, neighbour caches, DHCP reservations and
// monitoring keep seeing one device. With random it is drawn anew for
// every endpoint (Docker's built-ins' behaviour).

// OptMacAddressPolicy chooses how a macvlan endpoint's MAC is made when
// Docker gives none.
const OptMacAddressPolicy = "mac_address_policy"

const (
	MacStable = "stable"
	MacRandom = "random"
)

// macPolicies lists the valid mac_address_policy values, the default first.
var macPolicies = []string{MacStable, MacRandom}
