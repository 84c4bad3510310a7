package netlinkutil

import "github.com/underlay-net/underlay/netlinkutil/vocab"

// The kernel vocabulary lives in package vocab (a leaf pure code may
// import); these are its names as this package has always spelled them.

// Link kinds.
const (
	KindMacvlan = vocab.KindMacvlan
	KindIpvlan  = vocab.KindIpvlan
	KindVLAN    = vocab.KindVLAN
	KindDummy   = vocab.KindDummy
	KindBridge  = vocab.KindBridge
)

// Mode and flag names.
const (
	MacvlanBridge   = vocab.MacvlanBridge
	MacvlanPrivate  = vocab.MacvlanPrivate
	MacvlanVEPA     = vocab.MacvlanVEPA
	MacvlanPassthru = vocab.MacvlanPassthru

	IpvlanL2  = vocab.IpvlanL2
	IpvlanL3  = vocab.IpvlanL3
	IpvlanL3S = vocab.IpvlanL3S

	IpvlanFlagBridge  = vocab.IpvlanFlagBridge
	IpvlanFlagPrivate = vocab.IpvlanFlagPrivate
	IpvlanFlagVEPA    = vocab.IpvlanFlagVEPA
)

// MacvlanModes, IpvlanModes and IpvlanFlags list the valid names, the
// default first.
var (
	MacvlanModes = vocab.MacvlanModes
	IpvlanModes  = vocab.IpvlanModes
	IpvlanFlags  = vocab.IpvlanFlags
)

// IsEndpointKind reports whether a link kind is one underlay gives
// containers (macvlan or ipvlan).
func IsEndpointKind(kind string) bool { return vocab.IsEndpointKind(kind) }

// MarkPrefix starts the IFLA_IFALIAS underlay writes on every link it
// creates: MarkPrefix + the instance ID of the state file that owns it.
const MarkPrefix = vocab.MarkPrefix

// Mark returns the alias that marks a link as owned by the state file with
// the given instance ID.
func Mark(instance string) string { return vocab.Mark(instance) }

// FindLink finds a link of a list by its kernel name, then by an altname.
func FindLink(links []Link, name string) (Link, bool) { return vocab.FindLink(links, name) }
