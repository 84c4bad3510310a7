package driver

import (
	"slices"
	"testing"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/metrics"
)

// The metrics package names the ops and results it gives a series at 0
// (it may import only store), and docs/operating.md and the alert rules
// name them after it: here they are held to the planners' own. An op a
// planner gains must be added there too, or it would start without a
// series, and the docs would not list it until one was counted.
func TestMetricsZeroSeriesAreThePlannersOps(t *testing.T) {
	m := metrics.New(metrics.Options{})
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]string{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "op" || l.GetName() == "result" {
					series[f.GetName()] = append(series[f.GetName()], l.GetValue())
				}
			}
		}
	}
	names := func(ops []string) []string { slices.Sort(ops); return ops }
	var restore, repair []string
	for _, o := range plan.RestoreOps() {
		restore = append(restore, o.String())
	}
	for _, o := range plan.RepairOps() {
		if o != plan.OpRoutes { // a live repair pass leaves them to the restore (reconcile/watch.go)
			repair = append(repair, o.String())
		}
	}
	for _, c := range []struct {
		family string
		want   []string
	}{
		{"underlay_reconcile_actions_total", restore},
		{"underlay_repair_actions_total", repair},
		{"underlay_container_repairs_total", []string{reconcile.ContainerRepaired, reconcile.ContainerFailed, reconcile.ContainerGone, reconcile.ContainerAbandoned}},
	} {
		if got, want := names(series[c.family]), names(c.want); !slices.Equal(got, want) {
			t.Errorf("%s has series at 0 for %q, the planners' are %q: make metrics.New's list the planners'", c.family, got, want)
		}
	}
}
