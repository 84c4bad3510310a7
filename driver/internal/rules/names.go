package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/underlay-net/underlay/internal/dockerid"
)

// Link names underlay gives the links it creates. Both are 15 bytes: a
// three-letter prefix and 12 characters of the Docker ID (hashed when the ID
// is not hexadecimal), so `docker network ls` short IDs match link names.
const (
	endpointPrefix = "ule" // an endpoint's macvlan/ipvlan link in the host namespace
	dummyPrefix    = "uli" // the dummy parent of an internal network
	idChars        = dockerid.ShortLen
)

func idPart(id string) string {
	if len(id) >= idChars && strings.Trim(id[:idChars], "0123456789abcdef") == "" {
		return id[:idChars]
	}
	return hashed(id)
}

func hashed(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:idChars]
}

// EndpointLinkName is the host link name of an endpoint.
func EndpointLinkName(endpointID string) string { return endpointPrefix + idPart(endpointID) }

// AltEndpointLinkName is used when endpointLinkName is taken by another
// endpoint whose ID shares the first 12 characters.
func AltEndpointLinkName(endpointID string) string { return endpointPrefix + hashed(endpointID) }

// DummyName is the dummy parent link of an internal network.
func DummyName(networkID string) string { return dummyPrefix + idPart(networkID) }

// IsEndpointLinkName reports whether a name has the form of an endpoint link.
func IsEndpointLinkName(name string) bool {
	return len(name) == len(endpointPrefix)+idChars && strings.HasPrefix(name, endpointPrefix)
}

// isDummyName reports whether a name has the form of an internal network's
// dummy parent.
func isDummyName(name string) bool {
	return len(name) == len(dummyPrefix)+idChars && strings.HasPrefix(name, dummyPrefix)
}
