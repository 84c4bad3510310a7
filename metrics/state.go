package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// State is the state file as the gauges read it; *store.DB implements it.
type State interface {
	View(func(*store.Tx) error) error
}

// WatchState registers the gauges underlay_networks, underlay_endpoints,
// underlay_owned_links, underlay_dhcp_leases and underlay_dhcp6_leases,
// read from s at every scrape in one read-only
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
	leases, leases6            *prometheus.Desc
	now                        func() time.Time
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
		leases: prometheus.NewDesc("underlay_dhcp_leases",
			"DHCP leases of endpoints by state: bound (before T1), renewing (T1 to T2), rebinding (T2 to the expiry), lost (expired or refused: the address is blocked until won back).", []string{"state"}, nil),
		leases6: prometheus.NewDesc("underlay_dhcp6_leases",
			"DHCPv6 leases of endpoints of ipv6_mode=dhcpv6 networks by state: bound (before T1), renewing (T1 to T2), rebinding (T2 to the end of the valid lifetime), lost (expired, or the server no longer holds it: the address is blocked until won back).", []string{"state"}, nil),
		now: time.Now,
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.networks
	ch <- c.endpoints
	ch <- c.links
	ch <- c.leases
	ch <- c.leases6
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	var n store.Counts
	leases, leases6 := map[string]int{}, map[string]int{}
	now := c.now()
	if err := c.state.View(func(tx *store.Tx) (err error) {
		if n, err = tx.Counts(); err != nil {
			return err
		}
		return tx.ForEachNetwork(func(nw record.Network) error {
			v4, v6 := nw.Config.DHCP.Leases(), nw.Config.IPv6Mode == "dhcpv6" || nw.Config.DHCP.FromIPAM6
			if !v4 && !v6 {
				return nil
			}
			eps, err := tx.Endpoints(nw.ID)
			for _, ep := range eps {
				if v4 && ep.Lease != nil {
					leases[ep.Lease.State(now)]++
				}
				if v6 && ep.Lease6 != nil {
					leases6[ep.Lease6.State(now)]++
				}
			}
			return err
		})
	}); err != nil {
		ch <- prometheus.NewInvalidMetric(c.networks, fmt.Errorf("read the state file: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.networks, prometheus.GaugeValue, float64(n.Networks))
	ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, float64(n.Endpoints))
	ch <- prometheus.MustNewConstMetric(c.links, prometheus.GaugeValue, float64(n.ParentLinks+n.EndpointLinks+n.HostLinks))
	for _, st := range record.LeaseStates {
		ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(leases[st]), st)
		ch <- prometheus.MustNewConstMetric(c.leases6, prometheus.GaugeValue, float64(leases6[st]), st)
	}
}
