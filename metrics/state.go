package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/underlay-net/underlay/store"
)

// State is the state file as the gauges read it; *store.DB implements it.
type State interface {
	View(func(*store.Tx) error) error
}

// WatchState registers the gauges underlay_networks, underlay_endpoints and
// underlay_owned_links, read from s at every scrape in one read-only
// transaction (bbolt's readers hold up no writer, except a commit that
// must grow the file's mapping). Call it once, when the state file is
// open.
func (m *Metrics) WatchState(s State) error {
	if err := m.reg.Register(newStateCollector(s)); err != nil {
		return fmt.Errorf("register the state gauges: %w", err)
	}
	return nil
}

// stateCollector reads the counts of the state file at scrape time.
type stateCollector struct {
	state                      State
	networks, endpoints, links *prometheus.Desc
}

func newStateCollector(s State) *stateCollector {
	return &stateCollector{
		state: s,
		networks: prometheus.NewDesc("underlay_networks",
			"Networks in the state file (those being created included).", nil, nil),
		endpoints: prometheus.NewDesc("underlay_endpoints",
			"Endpoints in the state file.", nil, nil),
		links: prometheus.NewDesc("underlay_owned_links",
			"Links underlay owns by its records: the parent links it created, the endpoints' links and the host links.", nil, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.networks
	ch <- c.endpoints
	ch <- c.links
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	var n store.Counts
	if err := c.state.View(func(tx *store.Tx) (err error) {
		n, err = tx.Counts()
		return err
	}); err != nil {
		ch <- prometheus.NewInvalidMetric(c.networks, fmt.Errorf("read the state file: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.networks, prometheus.GaugeValue, float64(n.Networks))
	ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, float64(n.Endpoints))
	ch <- prometheus.MustNewConstMetric(c.links, prometheus.GaugeValue, float64(n.ParentLinks+n.EndpointLinks+n.HostLinks))
}
