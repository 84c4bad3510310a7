package rules

import (
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/store/record"
)

// BlockKey is an address blocked on a parent.
type BlockKey struct {
	Parent string
	Addr   netip.Addr
}

// PlanBlocks says which blocks to add and remove so that exactly the lost
// leases' addresses are blocked (present: this instance's blocks).
func PlanBlocks(lost, present []BlockKey) (add, remove []BlockKey) {
	want := map[BlockKey]bool{}
	for _, k := range lost {
		want[k] = true
	}
	have := map[BlockKey]bool{}
	for _, k := range present {
		have[k] = true
		if !want[k] {
			remove = append(remove, k)
		}
	}
	for _, k := range lost {
		if !have[k] {
			add = append(add, k)
			have[k] = true
		}
	}
	return add, remove
}

// MarkLost is a lease marked lost at now.
func MarkLost(l record.Lease, now time.Time, why string) record.Lease {
	if l.Lost.IsZero() {
		l.Lost, l.LostWhy = now, why
	}
	return l
}
