package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// Link names underlay gives the links it creates. Both are 15 bytes: a
// three-letter prefix and 12 characters of the Docker ID (hashed when the ID
// is not hexadecimal), so `docker network ls` short IDs match link names.
const (
	EndpointPrefix = "ule" // an endpoint's macvlan/ipvlan link in the host namespace
	dummyPrefix    = "uli" // the dummy parent of an internal network
	IDChars        = dockerid.ShortLen
)

func idPart(id string) string {
	if len(id) >= IDChars && strings.Trim(id[:IDChars], "0123456789abcdef") == "" {
		return id[:IDChars]
	}
	return hashed(id)
}

func hashed(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:IDChars]
}

// EndpointLinkName is the host link name of an endpoint.
func EndpointLinkName(endpointID string) string { return EndpointPrefix + idPart(endpointID) }

// AltEndpointLinkName is used when endpointLinkName is taken by another
// endpoint whose ID shares the first 12 characters.
func AltEndpointLinkName(endpointID string) string { return EndpointPrefix + hashed(endpointID) }

// DummyName is the dummy parent link of an internal network.
func DummyName(networkID string) string { return dummyPrefix + idPart(networkID) }

// IsEndpointLinkName reports whether a name has the form of an endpoint link.
func IsEndpointLinkName(name string) bool {
	return len(name) == len(EndpointPrefix)+IDChars && strings.HasPrefix(name, EndpointPrefix)
}

// IsDummyName reports whether a name has the form of an internal network's
// dummy parent.
func IsDummyName(name string) bool {
	return len(name) == len(dummyPrefix)+IDChars && strings.HasPrefix(name, dummyPrefix)
}

// The host link of a network with a host address.
const shimPrefix = "ulh"

// ShimName is the host's link on a network.
func ShimName(networkID string) string { return shimPrefix + idPart(networkID) }

// IsShimName reports whether a name has the form of a host link.
func IsShimName(name string) bool {
	return len(name) == len(shimPrefix)+IDChars && strings.HasPrefix(name, shimPrefix)
}

// Names the user gives: a parent link (-o parent=) and a container's
// interface (com.docker.network.endpoint.ifname).

// checkParentName refuses parent names the kernel could never hold.
func checkParentName(name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > kernel.MaxNameLen && !longVLAN(name):
		return Invalidf("parent %q is %d bytes long; Linux interface names are at most %d bytes: use the interface's real name", name, len(name), kernel.MaxNameLen)
	case name == "lo":
		return Invalidf("parent lo is the loopback interface, which cannot carry macvlan or ipvlan links: use a physical or VLAN interface")
	case strings.ContainsAny(name, "/: \t\n") || name == "." || name == "..":
		return Invalidf("parent %q is not a valid interface name", name)
	}
	return nil
}

// checkIfName refuses container interface names the kernel could never
// hold or every container already has.
func checkIfName(name string) error {
	switch {
	case name == "":
		return Invalidf("%s is given without a name: give the container's interface name, such as lan0", OptEndpointIfName)
	case len(name) > kernel.MaxNameLen:
		return Invalidf("interface name %q (%s) is %d bytes long; Linux interface names are at most %d bytes: use a shorter name", name, OptEndpointIfName, len(name), kernel.MaxNameLen)
	case name == "lo" || name == "." || name == "..":
		return Invalidf("interface name %q (%s) is reserved in every container: use another name, such as lan0", name, OptEndpointIfName)
	case strings.ContainsAny(name, "/: \t\n\r") || !utf8.ValidString(name):
		return Invalidf("interface name %q (%s) is not a valid Linux interface name (no /, :, or white space): use letters, digits, - or _", name, OptEndpointIfName)
	}
	return nil
}
