package driver

import (
	"context"
)

// The capabilities that make a network a swarm network; the swarm
// manager's calls and the gateway check are answered from the request
// alone (driver/internal/config, swarm.go).

// Capabilities is libnetwork's GetCapabilities answer (go-plugins-helpers'
// lacks GwAllocChecker).
type Capabilities struct {
	Scope             string
	ConnectivityScope string
	// GwAllocChecker asks current engines to call GwAllocCheck before
	// CreateNetwork; engines that do not know it ignore it.
	GwAllocChecker bool
}

// GetCapabilities answers the configured scope; the links reach beyond the
// host, so connectivity is global, as for Docker's built-in drivers.
func (d *Driver) GetCapabilities(context.Context) *Capabilities {
	return &Capabilities{Scope: d.scope, ConnectivityScope: "global", GwAllocChecker: true}
}
