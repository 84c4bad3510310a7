package plan

import (
	"github.com/underlay-net/underlay/netlinkutil/kernel"
)

// PlanRepair is what a repair pass does: the needed owned parent links
// that are missing (bases first) and the host links with their routes.
func PlanRepair(s Snapshot, links []kernel.Link, mark string) []Step {
	var plan []Step
	for _, st := range PlanRestore(Snapshot{Use: s.Use, Owned: s.Owned, Shims: s.Shims, ShimAddrs: s.ShimAddrs}, links, mark) {
		switch st.Op {
		case OpRecreate, OpShim, OpRoutes, OpHeal, OpFollow:
			plan = append(plan, st)
		}
	}
	return plan
}

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
