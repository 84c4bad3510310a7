package metrics

import (
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// LANChecks are the networks' latest LAN preflights as the gauge reads
// them (*driver.Driver implements it).
type LANChecks interface {
	// LANCheckCounts are, by [check, verdict], the number of networks
	// whose latest preflight gave that verdict for that check.
	LANCheckCounts() map[[2]string]int
}

// WatchLAN registers the gauge underlay_lan_check{check,verdict}, read
// from l at every scrape. Call it once.
func (m *Metrics) WatchLAN(l LANChecks) error {
	if err := m.reg.Register(&lanCollector{src: l, desc: prometheus.NewDesc("underlay_lan_check",
		"Networks whose latest LAN preflight (run in the background after their create) gave the verdict (ok, problem, unknown) for the check (new-mac, wireless, dhcp, ipv6-ra, dhcpv6, gateway, mtu, parent).",
		[]string{"check", "verdict"}, nil)}); err != nil {
		return fmt.Errorf("register the LAN preflight gauge: %w", err)
	}
	return nil
}

// lanCollector reads the LAN preflights' counts at scrape time.
type lanCollector struct {
	src  LANChecks
	desc *prometheus.Desc
}

func (c *lanCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lanCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.src.LANCheckCounts()
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[k]), k[0], k[1])
	}
}
