// Package metrics is underlay's Prometheus instrumentation: one registry
// of the daemon's own (never the global default one), the counters and
// histograms the request path, the driver and the IPAM report to, gauges
// read from the state file at scrape time, and the /metrics handler.
//
// It satisfies the hook interfaces of the packages it counts for
// (pluginapi.Observer, driver.Events, ipam.Events, store's ObserveCommit)
// structurally: it imports none of them but store, so the package graph
// stays cmd -> {driver, ipam, metrics} -> store.
package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served, on the plugin socket and on
// --metrics-listen.
const Path = "/metrics"

// Options tune New. The zero value is usable.
type Options struct {
	// Version is underlay's version (underlay_build_info).
	Version string
	// Runtime adds Go's runtime (go_*) and the process's (process_*)
	// standard collectors.
	Runtime bool
	// Logger gets the errors of scrapes; nil discards them.
	Logger *slog.Logger
}

// Metrics is the daemon's registry and the metrics it holds. Its methods
// are safe for concurrent use.
type Metrics struct {
	reg        *prometheus.Registry
	log        *slog.Logger
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	conflicts  prometheus.Counter
	stale      prometheus.Counter
	rolledBack *prometheus.CounterVec
	reconcile  *prometheus.CounterVec
	repair     *prometheus.CounterVec
	containers *prometheus.CounterVec
	commit     prometheus.Histogram
	lanInUse   prometheus.Counter
}

// New returns the metrics in a registry of their own.
func New(o Options) *Metrics {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: o.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "underlay_requests_total",
			Help: "Plugin API requests answered, by route (NetworkDriver.* and IpamDriver.*) and outcome (ok, invalid, conflict, error).",
		}, []string{"route", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "underlay_request_duration_seconds",
			Help:    "Time to answer a plugin API request, by route and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
		}, []string{"route", "outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "underlay_conflicts_refused_total",
			Help: "CreateNetwork requests refused because live networks hold the parent in a conflicting way.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "underlay_stale_holders_removed_total",
			Help: "Conflicting networks Docker no longer knows, removed before a create.",
		}),
		rolledBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "underlay_reservations_rolled_back_total",
			Help: "Reservations rolled back: kind=network for half-created networks (at start or past their deadline), kind=ipam for automatic pools Docker never confirmed.",
		}, []string{"kind"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "underlay_reconcile_actions_total",
			Help: "Steps of the start-up reconcile plan carried out, by op.",
		}, []string{"op"}),
		repair: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "underlay_repair_actions_total",
			Help: "Steps of live-repair passes carried out, by op.",
		}, []string{"op"}),
		containers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "underlay_container_repairs_total",
			Help: "Containers' interfaces after their parent link was deleted, by result: repaired (made again in the container), failed (not on the parent as it came back), gone (the container's namespace was gone: left alone), abandoned (the parent did not come back in time).",
		}, []string{"result"}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "underlay_store_commit_seconds",
			Help:    "Time of a committed state file write, from the call to the durable commit (a group commit's wait included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 0.1 ms to 3.3 s
		}),
		lanInUse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "underlay_ipam_probe_conflicts_total",
			Help: "Addresses the IPAM chose on a LAN pool, probed, and skipped because another host on the LAN answered for them.",
		}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "underlay_build_info",
		Help: "Always 1; its label is the running underlay's version.",
	}, []string{"version"})
	build.WithLabelValues(o.Version).Set(1)
	m.reg.MustRegister(m.requests, m.duration, m.conflicts, m.stale, m.rolledBack, m.reconcile, m.repair, m.containers, m.commit, m.lanInUse, build)
	// Both kinds exist from the start, at 0: a rate over them needs no
	// first event.
	m.rolledBack.WithLabelValues("network")
	m.rolledBack.WithLabelValues("ipam")
	// So do the ops and results docs/operating.md documents of the
	// reconcile (the restore plan's steps), the live repairs (the repair
	// planner's) and the containers' repairs: an alert on their increase
	// sees the first one, and a dashboard has series before it. The lists
	// are the planners' (driver's TestMetricsZeroSeriesAreThePlannersOps).
	for _, op := range []string{"rollback", "recreate", "release", "forget", "keep", "delete-stray", "repoint", "shim", "routes", "heal", "follow"} {
		m.reconcile.WithLabelValues(op)
	}
	for _, op := range []string{"recreate", "shim", "heal", "follow"} {
		m.repair.WithLabelValues(op)
	}
	for _, result := range []string{"repaired", "failed", "gone", "abandoned"} {
		m.containers.WithLabelValues(result)
	}
	if o.Runtime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Gatherer is the registry, for tests and for serving elsewhere.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the registry in Prometheus's text format. A collector
// that fails (the state file cannot be read) is logged and left out; the
// other metrics are still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      errorLog{m.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Register serves Handler at GET Path on mux.
func (m *Metrics) Register(mux *http.ServeMux) {
	mux.Handle("GET "+Path, m.Handler())
}

// errorLog is promhttp's logger on slog.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Error("metrics scrape", "error", fmt.Sprint(v...))
}

// ObserveRequest counts a plugin API request (pluginapi.Observer).
func (m *Metrics) ObserveRequest(route, outcome string, d time.Duration) {
	m.requests.WithLabelValues(route, outcome).Inc()
	m.duration.WithLabelValues(route, outcome).Observe(d.Seconds())
}

// ObserveCommit records a committed store write (store.Options).
func (m *Metrics) ObserveCommit(d time.Duration) { m.commit.Observe(d.Seconds()) }

// ConflictRefused counts a create refused for its parent's holders
// (driver.Events).
func (m *Metrics) ConflictRefused() { m.conflicts.Inc() }

// StaleRemoved counts a stale holder removed (driver.Events).
func (m *Metrics) StaleRemoved() { m.stale.Inc() }

// ReservationRolledBack counts a reservation rolled back, of kind network
// or ipam (driver.Events, ipam.Events).
func (m *Metrics) ReservationRolledBack(kind string) { m.rolledBack.WithLabelValues(kind).Inc() }

// ReconcileAction counts a step of the restore plan (driver.Events).
func (m *Metrics) ReconcileAction(op string) { m.reconcile.WithLabelValues(op).Inc() }

// RepairAction counts a step of a live-repair pass (driver.Events).
func (m *Metrics) RepairAction(op string) { m.repair.WithLabelValues(op).Inc() }

// ContainerRepair counts a container's interface repaired, or not, after
// its parent link was deleted (driver.Events).
func (m *Metrics) ContainerRepair(result string) { m.containers.WithLabelValues(result).Inc() }

// AddressInUseOnLAN counts an address the IPAM skipped because a LAN host
// answered its probe (ipam.ProbeEvents).
func (m *Metrics) AddressInUseOnLAN() { m.lanInUse.Inc() }
