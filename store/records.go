package store

import "github.com/underlay-net/underlay/store/record"

// The records the state file holds are plain values of package record;
// these are their names in this package.
type (
	Network     = record.Network
	Pool        = record.Pool
	Reservation = record.Reservation
	Endpoint    = record.Endpoint
	ParentLink  = record.ParentLink
	Lease       = record.Lease
	LeaseRoute  = record.LeaseRoute
	Lease6      = record.Lease6
)

// Lease states, as metrics, underlay ls and doctor show them.
const (
	LeaseBound     = record.LeaseBound
	LeaseRenewing  = record.LeaseRenewing
	LeaseRebinding = record.LeaseRebinding
	LeaseLost      = record.LeaseLost
)

// LeaseStates lists the states in the order they are shown.
var LeaseStates = record.LeaseStates
