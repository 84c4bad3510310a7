package plan

import (
	"slices"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// PlanRepair is what a repair pass does: the needed owned parent links
// that are missing (bases first) and the host links with their routes.
func PlanRepair(s Snapshot, links []kernel.Link, mark string) []Step {
	var plan []Step
	keep := RepairOps()
	for _, st := range PlanRestore(Snapshot{Use: s.Use, Owned: s.Owned, Shims: s.Shims, ShimAddrs: s.ShimAddrs}, links, mark) {
		if slices.Contains(keep, st.Op) {
			plan = append(plan, st)
		}
	}
	return plan
}

// RepairOps are the ops of PlanRestore's steps PlanRepair keeps.
func RepairOps() []op { return []op{OpRecreate, OpShim, OpRoutes, OpHeal, OpFollow} }

// RestoreOps are the ops PlanRestore's steps have, ContainerOps
// PlanContainers': every op is one or the other (TestOpsAreClassified).
func RestoreOps() []op {
	return []op{OpRollback, OpRecreate, OpRelease, OpForget, OpKeep, OpDeleteStray, OpRepoint, OpShim, OpRoutes, OpHeal, OpFollow}
}

// ContainerOps: see RestoreOps.
func ContainerOps() []op { return []op{OpContainer, OpAbandon} }

func StepsString(steps []Step) string {
	s := ""
	for i, st := range steps {
		if i > 0 {
			s += " "
		}
		s += st.String()
	}
	return s
}
